"""Tests of the simulated cluster (sim/ part 2): start-up model, scheduler, controllers, kubelet, herd demo."""
