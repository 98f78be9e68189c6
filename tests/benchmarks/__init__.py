"""Benchmarks run by `make bench` (`python -m tests.benchmarks`, the `*_bench.py` scripts, not collected by
pytest: they print numbers, they do not assert timings), their reports (REPORT.md and the `.md`/`.json`
beside it), and the tests of the scripts themselves (`test_*.py`)."""
