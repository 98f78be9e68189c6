"""Real nodes for the test bed: `python -m sim realcluster`, this repo's `kind create cluster`.

The real control plane (`sim.controlplane`) and N real nodes on this machine, each in a network namespace of
its own with its own containerd, kubelet and kube-proxy (binaries from `make node-tools`), CoreDNS as the
cluster's DNS, and the images the tests need imported into every node (no registry). Everything it starts or
changes on the host is undone when it stops (`RealCluster.stop`), also after a failed start.

- `plan`: the address plan and names (pure): pods 198.18.N.0/24 on node N, Services 198.19.0.0/16.
- `host`: what it changes on the host: the bridge, the nodes' network namespaces and routes, cgroups,
  sysctls, mounts, paths outside the data directory; each change is recorded so that teardown undoes it.
- `node`: one node's containerd, kubelet and kube-proxy: their configuration files and processes.
- `addons`: the cluster's DNS (CoreDNS) as kube-system's Deployment and Service.
- `cluster`: the whole: start in order, wait for Ready nodes, load images, stop and clean up.
- `cli`: the command.
"""
