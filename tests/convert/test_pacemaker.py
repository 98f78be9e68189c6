"""`kubectl stagger convert` on pod-pacemaker's `PacemakerConfig` (woehrl01/pod-pacemaker): the chart's own
default config (its template rendered with its values, as Helm renders it) and a config with every throttle,
numbers written as strings as its CRD takes them, become the node policies stagger's policy loader reads
from the same text (`stagger.policy.parse_policy_text`, the one PacemakerConfig reader: convert has none of
its own); the reader's notes are convert's notes, and its errors convert's errors (exit 1). What the API
server refuses by the CRD (a spec without nodeSelector, priority or throttleConfig: `spec: {}` as a
web-flattened example reads) is refused too; an object without spec (it selects every node, throttles
nothing) and a name that is no DNS-1123 label are taken. When no converted policy selects every node,
convert says which nodes get stagger's built-in policy (pod-pacemaker throttled nothing there). Then the
chart values (lockd.pacemakerConfigs, only to keep the objects; controller.webhook.namespaceOptIn) and
pod-pacemaker's objects to delete (its CNI configuration and node taint among them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubectl_stagger.convert import Input, InvalidInput, convert_inputs
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
    said = [note for note in run.notes if not note.startswith(("chart value", "no longer needed"))]
    assert said == [f"{path}: {note}" for note in parse_policy_text(text).notes]


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


@pytest.mark.slow
def test_what_the_cluster_still_needs(tmp_path: Path) -> None:
    path = tmp_path / "pacemakerconfigs.yaml"
    path.write_text(EVERY_THROTTLE)
    run = convert(path)
    values = [note for note in run.notes if note.startswith("chart value")]
    assert values[0].startswith(
        "chart value (to keep the PacemakerConfig objects as they are instead of this file): "
        "lockd.pacemakerConfigs: true: lockd reads the PacemakerConfig objects"
    )
    assert values[1].startswith(
        "chart value: controller.webhook.namespaceOptIn: true: pod-pacemaker throttled every pod"
    )
    # Only the value needed whatever the user keeps is in the --set line.
    assert (
        values[2]
        == "chart values as flags of helm install or upgrade: --set controller.webhook.namespaceOptIn=true"
    )
    obsolete = "\n".join(note for note in run.notes if note.startswith("no longer needed: "))
    assert (
        "/etc/cni/net.d/00-merged-pod-pacemaker.conflist" in obsolete
        and "cni.disableThrottle: true" in obsolete
    )
    assert "the pod-pacemaker taint" in obsolete and "pacemakerconfigs.woehrl.net" in obsolete


def config(spec: str, *, name: str = "java-nodes") -> str:
    return f"apiVersion: woehrl.net/v1alpha\nkind: PacemakerConfig\nmetadata:\n  name: {name}\n{spec}"


JAVA_SPEC = (
    "spec:\n  nodeSelector: {pool: java}\n  priority: 1\n  throttleConfig: {maxConcurrent: {value: 2}}\n"
)
# The same object as a copy from a web page can make it: each line's indentation lost.
FLATTENED = "".join(line.lstrip() + "\n" for line in config(JAVA_SPEC).splitlines())


@pytest.mark.parametrize(
    ("text", "errors"),
    [
        pytest.param(
            config("spec: {}\n"),
            [
                "PacemakerConfig 'java-nodes': spec.nodeSelector, spec.priority, spec.throttleConfig: required by "
                "pod-pacemaker's CRD: the API server refuses the object (an empty spec: was the YAML's indentation "
                "lost, copied from a web page?)"
            ],
            id="empty-spec",
        ),
        pytest.param(
            config("spec:\n  nodeSelector: {pool: java}\n  priority: 1\n"),
            [
                "PacemakerConfig 'java-nodes': spec.throttleConfig: required by pod-pacemaker's CRD: the API server "
                "refuses the object"
            ],
            id="no-throttle-config",
        ),
        pytest.param(
            "apiVersion: v1\nkind: List\nitems:\n- " + config("spec: {priority: 1}\n").replace("\n", "\n  "),
            [
                "items[0] (PacemakerConfig 'java-nodes'): spec.nodeSelector, spec.throttleConfig: required by "
                "pod-pacemaker's CRD: the API server refuses the object"
            ],
            id="in-a-list",
        ),
        pytest.param(
            FLATTENED,
            [
                "PacemakerConfig.name: unknown key; expected one of apiVersion, kind, metadata, spec, status",
                "PacemakerConfig.nodeSelector: unknown key; expected one of apiVersion, kind, metadata, spec, status",
                "PacemakerConfig.priority: unknown key; expected one of apiVersion, kind, metadata, spec, status",
                "PacemakerConfig.throttleConfig: unknown key; expected one of apiVersion, kind, metadata, spec, "
                "status",
                "PacemakerConfig.metadata: is required",
            ],
            id="web-flattened",
        ),
    ],
)
def test_what_the_api_server_refuses_is_refused(text: str, errors: list[str]) -> None:
    with pytest.raises(InvalidInput) as refused:
        convert_inputs([Input(source="p.yaml", text=text)])
    assert list(refused.value.errors) == [f"p.yaml: {error}" for error in errors]


def test_an_object_without_spec_selects_every_node_and_throttles_nothing() -> None:
    converted = convert_inputs([Input(source="p.yaml", text=config("spec:\n"))])
    assert converted.policy_file.node_policies == (NodePolicy(name="java-nodes"),)
    assert (
        "p.yaml: PacemakerConfig 'java-nodes': no spec: pod-pacemaker reads it as selecting every node and "
        "throttling nothing; so does its node policy here"
    ) in converted.notes
    assert converted.not_carried == ()


def test_a_name_that_is_no_dns_label_is_made_one() -> None:
    converted = convert_inputs([Input(source="p.yaml", text=config(JAVA_SPEC, name="Java.Nodes"))])
    assert [each.name for each in converted.policy_file.node_policies] == ["java-nodes"]
    assert converted.notes[0] == (
        "p.yaml: PacemakerConfig 'java-nodes': read as the node policy 'java-nodes' (its name 'Java.Nodes' is no "
        "DNS-1123 label, as a stagger node policy's must be)"
    )


BUILTIN = (
    "get stagger's built-in node policy (cpu maxLoad 90, maxConcurrent perCore 0.5), where pod-pacemaker "
    "throttled nothing (no matching config); to keep them unthrottled add a node policy with nodeSelector: {} "
    "and no throttleConfig"
)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param(
            config(JAVA_SPEC),
            [f"nodes none of these select (matching none of: pool=java (java-nodes)) {BUILTIN}"],
            id="one-pool",
        ),
        pytest.param(
            config(JAVA_SPEC) + "---\n" + config(JAVA_SPEC.replace("java", "php"), name="php-nodes"),
            [
                f"nodes none of these select (matching none of: pool=java (java-nodes); pool=php (php-nodes)) {BUILTIN}"
            ],
            id="two-pools",
        ),
        pytest.param(EVERY_THROTTLE, [], id="one-selects-every-node"),
        pytest.param(config("spec:\n"), [], id="no-spec-selects-every-node"),
    ],
)
def test_nodes_no_config_selects_are_said(text: str, said: list[str]) -> None:
    converted = convert_inputs([Input(source="p.yaml", text=text)])
    assert list(converted.not_carried) == said
