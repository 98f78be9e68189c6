"""Tests of the Kubernetes API server emulator (sim.emulator), mostly through the official client and raw HTTP."""
