"""The simulated cluster: nodes whose kubelets run the real init client against a real lockd per node, a
scheduler, the workload controllers and a start-up model, all talking to a Kubernetes API server over
HTTP. `simcluster.SimCluster` puts the parts together; `herd` measures a burst of pods on it."""
