"""lockd's `--pacemaker-configs`: pod-pacemaker's PacemakerConfig objects read live as node policies.

The pure part: an object reads as the same document of a policy file would (the same node policy, the
same errors, each naming the object and the field); the table of objects keeps an object's last good
version when a new one is invalid; which node policy applies, from the file's, the objects' and the node's
labels (hypothesis: the highest priority that matches wins, the file's on a tie, then the objects' by
name; an object named as a file node policy never applies); the flag's settings.

The shell against the API emulator, with lockd as a real process over HTTP: the emulator serves no custom
resources, so it answers the list 404 as a real API server does without the CRD. lockd then logs it once
however many times it looks again, says so in /status, keeps granting by the file, and never crash-loops;
without the flag it never asks. The objects themselves (found after the CRD is installed, changed,
invalid, tied, named as a file policy, deleted with their CRD, and a change waking a long poll) are tested
against the real control plane: tests/controlplane/test_pacemaker_configs.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from lockd.nodepolicy import choose_node_policy, shadowed_objects
from lockd.pacemakerwatch import ObjectTable, read_object
from lockd.settings import SettingsError, parse_settings
from sim.emulator.server import ApiServer
from stagger import policy
from stagger.kube import RestClient
from stagger.selectors import LabelSelector
from tests.lockd_cluster.conftest import NODE, make_node, make_pod
from tests.processes import clean_env, free_port
from tests.waiting import eventually

API_VERSION = "woehrl.net/v1alpha"


def config(name: str, *, spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    """A PacemakerConfig as the API server serves it (metadata it adds included)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "PacemakerConfig",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
            **metadata,
        },
        "spec": spec
        if spec is not None
        else {"nodeSelector": {}, "priority": 0, "throttleConfig": {"maxConcurrent": {"value": 2}}},
    }


# --- an object reads as a document of the policy file -------------------------------------------------

OBJECTS = [
    pytest.param(config("plain"), id="plain"),
    pytest.param(
        config(
            "strings",
            spec={
                "nodeSelector": {"pool": "gpu"},
                "priority": 7,
                "throttleConfig": {
                    "cpu": {"maxLoad": "80", "incrementBy": "5.5"},
                    "maxConcurrent": {"perCore": "0.5"},
                    "rateLimit": {"burst": 2, "fillFactor": "500ms"},
                },
            },
        ),
        id="numbers-as-strings",
    ),
    pytest.param(config("bad.name"), id="name-not-a-dns-label"),
    pytest.param(
        config(
            "hot", spec={"nodeSelector": {}, "priority": 1, "throttleConfig": {"cpu": {"maxLoad": "150"}}}
        ),
        id="max-load-over-100",
    ),
    pytest.param(
        config("typo", spec={"priority": 1, "throttleConfig": {"maxConcurent": {"value": 1}}}),
        id="unknown-key",
    ),
    pytest.param(config("sel", spec={"nodeSelector": {"bad key!": "x"}, "priority": 1}), id="bad-label-key"),
]


@pytest.mark.parametrize("obj", OBJECTS)
def test_an_object_reads_as_the_same_document_of_a_policy_file(obj: dict[str, Any]) -> None:
    read = read_object(obj)
    assert read.name == obj["metadata"]["name"]
    try:
        in_file = policy.parse_policy_text(yaml.safe_dump(obj), source="policies.yaml")
    except policy.PolicyError as err:
        assert read.node_policy is None
        assert read.errors == err.errors
        return
    assert read.errors == ()
    assert (read.node_policy,) == in_file.node_policies


@pytest.mark.parametrize(
    ("obj", "named"),
    [
        pytest.param(config("bad.name"), 'PacemakerConfig "bad.name".metadata.name: ', id="name"),
        pytest.param(
            config("hot", spec={"priority": 1, "throttleConfig": {"cpu": {"maxLoad": "150"}}}),
            'PacemakerConfig "hot".spec.throttleConfig.cpu.maxLoad: must be greater than 0 and at most 100',
            id="max-load",
        ),
        pytest.param(
            config("typo", spec={"priority": 1, "throttleConfig": {"maxConcurent": {"value": 1}}}),
            'PacemakerConfig "typo".spec.throttleConfig.maxConcurent: unknown key',
            id="unknown-key",
        ),
        pytest.param(
            config("prio", spec={"priority": "high"}), 'PacemakerConfig "prio".spec.priority: ', id="priority"
        ),
    ],
)
def test_an_invalid_object_names_itself_and_the_bad_field(obj: dict[str, Any], named: str) -> None:
    read = read_object(obj)
    assert read.node_policy is None
    assert any(error.startswith(named) for error in read.errors), read.errors


def limit(name: str, value: int, **spec: Any) -> dict[str, Any]:
    return config(name, spec={"priority": 1, "throttleConfig": {"maxConcurrent": {"value": value}}, **spec})


def test_an_invalid_version_keeps_the_objects_last_good_one() -> None:
    table = ObjectTable()
    assert table.apply("ADDED", limit("a", 2)) == "applied"
    good = table.policies()
    assert [p.throttle.max_concurrent.value for p in good if p.throttle.max_concurrent] == [2]
    broken = config("a", spec={"priority": 1, "throttleConfig": {"cpu": {"maxLoad": "150"}}})
    assert table.apply("MODIFIED", broken) == "invalid"
    assert table.policies() == good
    assert "spec.throttleConfig.cpu.maxLoad" in table.invalid["a"]
    # The same problem again (a relist) is no new problem: logged and counted once.
    assert table.apply("MODIFIED", broken) == "unchanged"
    assert table.apply("MODIFIED", limit("a", 2)) == "recovered"
    assert table.invalid == {}
    assert table.apply("MODIFIED", limit("a", 3)) == "applied"
    assert table.apply("DELETED", limit("a", 3)) == "removed"
    assert table.policies() == ()


def test_a_new_invalid_object_is_not_used() -> None:
    table = ObjectTable()
    assert table.apply("ADDED", config("bad.name")) == "invalid"
    assert table.policies() == ()
    assert table.apply("DELETED", config("bad.name")) == "unchanged"
    assert table.invalid == {}


# --- which node policy applies ------------------------------------------------------------------------

LABELS = {"pool": "gpu"}
GPU = LabelSelector.from_labels(LABELS)
CPU = LabelSelector.from_labels({"pool": "cpu"})


def node_policy(name: str, priority: int, selector: LabelSelector = GPU) -> policy.NodePolicy:
    return policy.NodePolicy(name=name, priority=priority, node_selector=selector)


FILE = policy.PolicyFile(node_policies=(node_policy("general", 0, LabelSelector()), node_policy("gpu", 5)))


@pytest.mark.parametrize(
    ("policy_file", "objects", "chosen", "source"),
    [
        pytest.param(FILE, (node_policy("fast", 9),), "fast", "PacemakerConfig/fast", id="object-higher"),
        pytest.param(FILE, (node_policy("tied", 5),), "gpu", "policies.yaml", id="tie-file-wins"),
        pytest.param(FILE, (node_policy("gpu", 99),), "gpu", "policies.yaml", id="same-name-file-wins"),
        pytest.param(FILE, (node_policy("fast", 9, CPU),), "gpu", "policies.yaml", id="object-not-matching"),
        pytest.param(None, (node_policy("fast", 0),), "fast", "PacemakerConfig/fast", id="no-file"),
        pytest.param(
            policy.PolicyFile(), (node_policy("fast", 0),), "fast", "PacemakerConfig/fast", id="file-no-nodes"
        ),
        pytest.param(
            policy.PolicyFile(node_policies=(node_policy("gpu", 5, CPU),)),
            (node_policy("b", 3), node_policy("a", 3)),
            "a",
            "PacemakerConfig/a",
            id="objects-tied-by-name",
        ),
        pytest.param(
            policy.PolicyFile(node_policies=(node_policy("gpu", 5, CPU),)),
            (node_policy("fast", 9, CPU),),
            policy.DEFAULT_NODE_POLICY.name,
            "built-in",
            id="none-matches",
        ),
    ],
)
def test_which_node_policy_applies(
    policy_file: policy.PolicyFile | None, objects: tuple[policy.NodePolicy, ...], chosen: str, source: str
) -> None:
    active = choose_node_policy(
        policy_file=policy_file, source="policies.yaml", node_labels=LABELS, objects=objects
    )
    assert (active.node_policy.name, active.source) == (chosen, source)
    assert f"priority {active.node_policy.priority}" in active.why or source == "built-in"


def test_an_object_named_as_a_file_policy_is_reported() -> None:
    objects = (node_policy("gpu", 99), node_policy("fast", 1))
    assert shadowed_objects(policy_file=FILE, objects=objects) == ["gpu"]
    assert shadowed_objects(policy_file=None, objects=objects) == []


NAMES = st.sampled_from(["a", "b", "c", "d", "e"])
SELECTORS = st.sampled_from([GPU, CPU, LabelSelector()])


@st.composite
def policies(draw: st.DrawFn) -> tuple[policy.NodePolicy, ...]:
    names = draw(st.lists(NAMES, unique=True, max_size=4))
    return tuple(node_policy(name, draw(st.integers(0, 2)), draw(SELECTORS)) for name in names)


@given(file_policies=policies(), objects=policies(), data=st.data())
def test_the_highest_priority_wins_and_the_file_wins_ties(
    file_policies: tuple[policy.NodePolicy, ...], objects: tuple[policy.NodePolicy, ...], data: st.DataObject
) -> None:
    policy_file = policy.PolicyFile(node_policies=file_policies)
    active = choose_node_policy(policy_file=policy_file, source="f", node_labels=LABELS, objects=objects)
    # The objects' order (a watch's) does not matter.
    shuffled = tuple(data.draw(st.permutations(objects)))
    assert active == choose_node_policy(
        policy_file=policy_file, source="f", node_labels=LABELS, objects=shuffled
    )
    file_names = {p.name for p in file_policies}
    from_file = [p for p in file_policies if p.node_selector.matches(LABELS)]
    from_objects = [p for p in objects if p.node_selector.matches(LABELS) and p.name not in file_names]
    if not from_file and not from_objects:
        assert active.source == "built-in"
        return
    best = max(p.priority for p in from_file + from_objects)
    assert active.node_policy.priority == best
    file_best = [p for p in from_file if p.priority == best]
    if file_best:
        assert (active.node_policy, active.source) == (file_best[0], "f")
    else:
        first = min((p for p in from_objects if p.priority == best), key=lambda p: p.name)
        assert (active.node_policy, active.source) == (first, f"PacemakerConfig/{first.name}")


# --- the flag ---------------------------------------------------------------------------------------------


def test_the_flag_is_off_by_default_and_set_as_the_other_settings_are() -> None:
    default = parse_settings([], {})
    assert (default.cluster.pacemaker_configs, default.cluster.pacemaker_recheck) == (False, 60.0)
    by_flag = parse_settings(["--pacemaker-configs", "--pacemaker-recheck", "5s"], {})
    assert (by_flag.cluster.pacemaker_configs, by_flag.cluster.pacemaker_recheck) == (True, 5.0)
    by_env = parse_settings([], {"STAGGER_PACEMAKER_CONFIGS": "true", "STAGGER_PACEMAKER_RECHECK": "2m"})
    assert (by_env.cluster.pacemaker_configs, by_env.cluster.pacemaker_recheck) == (True, 120.0)
    with pytest.raises(SettingsError, match="--pacemaker-configs: only in cluster mode"):
        parse_settings(["--standalone", "--pacemaker-configs"], {})


# --- lockd as a process, the emulator answering 404 ---------------------------------------------------

POLICIES = "nodePolicies:\n- name: general\n  throttleConfig: {maxConcurrent: {value: 1}}\n"
ABSENT_LINE = "the PacemakerConfig CRD (pacemakerconfigs.woehrl.net) is not installed"


@dataclass
class LockdProcess:
    proc: asyncio.subprocess.Process
    url: str
    log: Path
    session: aiohttp.ClientSession

    async def get(self, path: str, **params: str) -> tuple[int, Any]:
        async with self.session.get(self.url + path, params=params) as response:
            body = (
                await response.json()
                if response.content_type == "application/json"
                else await response.text()
            )
            return response.status, body

    async def status(self) -> dict[str, Any]:
        body: dict[str, Any] = (await self.get("/status"))[1]
        return body

    async def ready(self) -> bool:
        assert self.proc.returncode is None, f"lockd exited {self.proc.returncode}: {self.log.read_text()}"
        with contextlib.suppress(aiohttp.ClientError):
            return (await self.get("/readyz"))[0] == 200
        return False


@contextlib.asynccontextmanager
async def lockd_process(
    *args: str, work: Path, kubeconfig: Path, node: str = NODE, policies: str = POLICIES
) -> AsyncIterator[LockdProcess]:
    """`python -m lockd` in cluster mode for `node` with the policy file `policies`, once ready; stopped
    with SIGTERM at the end. Its log is the file `log`. (tests/controlplane/test_pacemaker_configs.py
    uses it too.)"""
    (work / "policies.yaml").write_text(policies)
    (work / "load.json").write_text('{"cpuPercent": 1.0, "ioPercent": 0.0}')
    port, log = free_port(), work / "lockd.log"
    argv = [sys.executable, "-m", "lockd", "--kubeconfig", str(kubeconfig), "--node-name", node]
    argv += ["--listen", f"127.0.0.1:{port}", "--policies", str(work / "policies.yaml")]
    argv += ["--load-file", str(work / "load.json"), "--cores", "4", *args]
    with log.open("w") as stderr:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=clean_env(), stdout=asyncio.subprocess.DEVNULL, stderr=stderr
        )
    try:
        async with aiohttp.ClientSession() as session:
            lockd = LockdProcess(proc=proc, url=f"http://127.0.0.1:{port}", log=log, session=session)
            await eventually(lockd.ready, within=20, what="lockd to become ready")
            yield lockd
    finally:
        if proc.returncode is None:
            proc.terminate()
        async with asyncio.timeout(15):
            await proc.wait()


async def test_without_the_crd_lockd_says_so_once_and_keeps_granting_by_the_file(
    api: ApiServer, kube: RestClient, tmp_path: Path
) -> None:
    await make_node(kube)
    pod = await make_pod(kube, "p0")
    kubeconfig = tmp_path / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    async with lockd_process(
        "--pacemaker-configs", "--pacemaker-recheck", "0.1s", work=tmp_path, kubeconfig=kubeconfig
    ) as lockd:

        async def looked_again() -> bool:
            return bool((await lockd.status())["policy"]["pacemakerConfigs"]["absentChecks"] >= 4)

        await eventually(looked_again, what="lockd to look for the CRD again")
        status = await lockd.status()
        found = status["policy"]["pacemakerConfigs"]
        assert found["crd"] == "absent"
        assert found["message"] == (
            "the PacemakerConfig CRD (pacemakerconfigs.woehrl.net) is not installed: looking again every 0.1s"
        )
        assert (found["objects"], found["invalid"], found["shadowedByFile"]) == ([], {}, [])
        assert (status["policy"]["name"], status["policy"]["source"]) == (
            "general",
            str(tmp_path / "policies.yaml"),
        )
        meta = pod["metadata"]
        granted = await lockd.get("/v1/lock", namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
        assert granted[0] == 200
        assert lockd.proc.returncode is None
    logged = lockd.log.read_text()
    assert logged.count(ABSENT_LINE) == 1, logged
    assert "Traceback" not in logged


async def test_without_the_flag_lockd_never_asks_for_pacemaker_configs(
    api: ApiServer, kube: RestClient, tmp_path: Path
) -> None:
    await make_node(kube)
    kubeconfig = tmp_path / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    async with lockd_process(work=tmp_path, kubeconfig=kubeconfig) as lockd:
        assert "pacemakerConfigs" not in (await lockd.status())["policy"]
    # The emulator counts a request for a resource it does not serve as "unknown".
    assert not [key for key in api.request_counts if key[1] == "unknown"]
