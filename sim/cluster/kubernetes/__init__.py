"""The simulated cluster's Kubernetes parts: the kubelets (`kubelet`, with pod status as the real one
writes it, `podstatus`), the scheduler and its placement (`scheduler`, `placement`), the workload
controllers (`controllers`, `workloads/`), and the node agent that registers a simulated node with a real
control plane (`nodeagent`)."""
