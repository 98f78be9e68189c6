"""stagger's version: one definition, read by pyproject (setuptools' dynamic version), the processes' build-info
metrics and `kubectl stagger`; the chart's appVersion says the same (tests/chart/test_chart.py)."""

VERSION = "0.1.0"
