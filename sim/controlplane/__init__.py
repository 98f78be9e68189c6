"""A real Kubernetes control plane on loopback (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, built by `make control-plane`) for tests and by hand: `python -m sim.controlplane`.

`sim.controlplane.launcher.ControlPlane` is the API; `sim.controlplane.cli.main` the command.
"""
