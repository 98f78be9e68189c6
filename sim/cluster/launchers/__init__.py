"""Launchers of the real stagger processes on the simulated cluster: lockd per node (`lockdproc`), the
controller's replicas (`controllerproc`), and the init client in a pod (`initproc`, through a fork server
`forkserver`, with the container's environment as the kubelet builds it, `containerenv`)."""
