"""sim: Kubernetes API emulator and simulated cluster, for tests, demo and benchmarks."""
