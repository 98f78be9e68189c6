"""Benchmarks run by `make bench` (not collected by pytest): they print numbers, they do not assert timings."""
