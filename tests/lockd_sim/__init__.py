"""lockd in cluster mode on the simulated cluster: real lockd processes, real init clients, real kubelets."""
