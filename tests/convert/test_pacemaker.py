"""`kubectl stagger convert` on pod-pacemaker's `PacemakerConfig` (woehrl01/pod-pacemaker): the chart's own
default config (its template rendered with its values, as Helm renders it) and a config with every throttle,
numbers written as strings as its CRD takes them, become the node policies stagger's policy loader reads
from the same text (`stagger.policy.parse_policy_text`, the one PacemakerConfig reader: convert has none of
its own); the reader's notes are convert's notes, and its errors convert's errors (exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stagger.policy import LoadAvg, MaxConcurrent, NodePolicy, RateLimit, ThrottleConfig, parse_policy_text
from stagger.selectors import LabelSelector
from tests.convert.plugin import convert, verbatim


def rendered_default_config() -> str:
    """charts/pod-pacemaker/templates/defaultconfig.yml with the chart's values.yaml, as `helm template`
    renders it: the `if` holds (defaultThrottleConfig.enabled: true) and `toYaml | nindent 4` writes the
    values' config, indented by 4, on the lines after `throttleConfig:`."""
    values = yaml.safe_load(verbatim("pacemaker-values.yaml"))
    assert values["defaultThrottleConfig"]["enabled"] is True
    config = yaml.safe_dump(values["defaultThrottleConfig"]["config"], default_flow_style=False)
    lines: list[str] = []
    for line in verbatim("pacemaker-defaultconfig.yml.tpl").splitlines():
        if line.strip() in ("{{ if .Values.defaultThrottleConfig.enabled }}", "{{ end }}"):
            continue
        head, marker, _ = line.partition("{{ .Values.defaultThrottleConfig.config | toYaml | nindent 4 }}")
        if marker:
            lines.append(head.rstrip())
            lines += ["    " + each for each in config.splitlines()]
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_the_charts_default_config(tmp_path: Path) -> None:
    text = rendered_default_config()
    assert 'perCore: "0.5"' in verbatim("pacemaker-values.yaml")  # a number as a string, as the CRD takes it
    path = tmp_path / "default-pacemaker-config.yaml"
    path.write_text(text)
    run = convert(path)
    assert run.loaded().node_policies == (
        NodePolicy(
            name="default-pacemaker-config",
            throttle=ThrottleConfig(max_concurrent=MaxConcurrent(per_core=0.5)),
        ),
    )
    assert run.loaded() == parse_policy_text(text)
    assert run.not_carried == []
    assert run.notes == [f"{path}: {note}" for note in parse_policy_text(text).notes]


# Every field of api/v1alpha/pacemakerconfig.go, numbers as strings where its CRD types them as strings.
EVERY_THROTTLE = """\
apiVersion: woehrl.net/v1alpha
kind: PacemakerConfig
metadata:
  name: java-nodes
spec:
  nodeSelector:
    pool: java
  priority: 10
  throttleConfig:
    rateLimit:
      fillFactor: 1s
      burst: 3
    maxConcurrent:
      value: 4
      perCore: "0.5"
    cpu:
      maxLoad: "80"
      incrementBy: "10"
    io:
      maxLoad: "50"
      incrementBy: "5"
    loadAvg:
      maxLoad: "1.5"
      incrementBy: "0.25"
      perCore: true
---
apiVersion: woehrl.net/v1alpha
kind: PacemakerConfig
metadata:
  name: default
spec:
  priority: 0
  nodeSelector: {}
  throttleConfig:
    maxConcurrent:
      perCore: "0.5"
"""


@pytest.mark.slow
def test_every_throttle_with_string_numbers(tmp_path: Path) -> None:
    path = tmp_path / "pacemakerconfigs.yaml"
    path.write_text(EVERY_THROTTLE)
    run = convert(path)
    java, default = run.loaded().node_policies
    assert java == NodePolicy(
        name="java-nodes",
        node_selector=LabelSelector.from_labels({"pool": "java"}),
        priority=10,
        throttle=ThrottleConfig(
            cpu_max_load=80.0,
            cpu_increment_by=10.0,
            io_max_load=50.0,
            io_increment_by=5.0,
            max_concurrent=MaxConcurrent(per_core=0.5, value=4),
            rate_limit=RateLimit(burst=3, fill_seconds=1.0),
            load_avg=LoadAvg(max_load=1.5, per_core=True, increment_by=0.25),
        ),
    )
    assert default.name == "default"
    assert run.loaded() == parse_policy_text(EVERY_THROTTLE)


@pytest.mark.slow
def test_the_readers_errors_are_converts_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(EVERY_THROTTLE.replace('maxLoad: "80"', 'maxLoad: "eighty"'))
    run = convert(path)
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr and "maxLoad" in run.stderr and "eighty" in run.stderr
