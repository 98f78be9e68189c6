"""sim: Kubernetes without a cluster, for stagger's tests, demo and benchmarks (never part of the image).

* `sim.emulator`: a Kubernetes API server emulator (HTTP, JSON), good enough for kubectl and the
  official client.
* `sim.cluster`: a simulated cluster (scheduler, kubelets running the real init client against a real
  lockd per node, workload controllers, a start-up model) that talks to any API server over HTTP.
* `sim.controlplane`: the real etcd and kube-apiserver (built from Go) on loopback.
* `sim.cli`: `python -m sim COMMAND`, the only layer that puts the others together.

The emulator and the cluster never import each other (import-linter checks it); `sim.kubeconfig` is
shared below both.
"""
