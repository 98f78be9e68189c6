"""Tests of the simulated cluster (sim.cluster): start-up model, placement, workload controllers, pod status,
scenarios, and the cluster running on an emulator."""
