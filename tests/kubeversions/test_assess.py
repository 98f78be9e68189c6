"""`stagger.kubeversions`: reading a `/version` answer (major and minor as providers write them, else the
gitVersion; None when neither reads, never an exception) and what it means for stagger (tested or not,
which features need a newer minor, and the sentence for each); the tested range agrees with what CI runs
and the chart says."""

from __future__ import annotations

import re
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given

from stagger import kubeversions
from stagger.kubeversions import NEEDS, NEWEST_TESTED, OLDEST_TESTED, assess, parse_version

ROOT = Path(__file__).resolve().parents[2]


def answer(major: object, minor: object, git_version: object = None) -> dict[str, object]:
    info: dict[str, object] = {"major": major, "minor": minor}
    if git_version is not None:
        info["gitVersion"] = git_version
    return info


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        pytest.param(answer("1", "34", "v1.34.4"), (1, 34), id="plain"),
        pytest.param(answer("1", "34+", "v1.34.4-gke.100"), (1, 34), id="plus-gke"),
        pytest.param(answer("1", "33+", "v1.33.5-eks-113cf36"), (1, 33), id="plus-eks"),
        pytest.param(answer("", "", "v1.35.0+k3s1"), (1, 35), id="empty-fields-git-version"),
        pytest.param({"gitVersion": "v1.29.3"}, (1, 29), id="git-version-only"),
        pytest.param({"gitVersion": "1.38.0-alpha.1"}, (1, 38), id="git-version-without-v"),
        pytest.param(answer(1, 36), (1, 36), id="numbers"),
        pytest.param(answer("", "", "v0.0.0-master+$Format:%H$"), None, id="unstamped-build"),
        pytest.param(answer("1", "x", "garbage"), None, id="garbage"),
        pytest.param(answer(True, True), None, id="booleans"),
        pytest.param(answer("1", "9" * 5000), None, id="huge-minor"),
        pytest.param({}, None, id="empty"),
    ],
)
def test_parse_version(info: dict[str, object], expected: tuple[int, int] | None) -> None:
    assert parse_version(info) == expected


# The oldest minor that has every need, and the minors just before each need's GA.
FULL = max(need.ga for need in NEEDS)


@pytest.mark.parametrize(
    ("minor", "tested", "supported", "missing_features", "where"),
    [
        pytest.param(OLDEST_TESTED, True, True, set(), "within", id="oldest-tested"),
        pytest.param(NEWEST_TESTED, True, True, set(), "within", id="newest-tested"),
        pytest.param((1, 38), False, True, set(), "newer than tested", id="newer"),
        pytest.param((2, 0), False, True, set(), "newer than tested", id="next-major"),
        pytest.param((1, 33), False, False, set(), "older", id="older-nothing-missing"),
        pytest.param(
            (1, 31),
            False,
            False,
            {"the node-name claim of service-account tokens (authentication.kubernetes.io/node-name)"},
            "older",
            id="1.31-token-claim",
        ),
        pytest.param(
            (1, 29),
            False,
            False,
            {need.feature for need in NEEDS},
            "older",
            id="1.29-everything",
        ),
    ],
)
def test_assess(
    minor: tuple[int, int], tested: bool, supported: bool, missing_features: set[str], where: str
) -> None:
    version = f"v{minor[0]}.{minor[1]}.2"
    result = assess(answer(str(minor[0]), str(minor[1]), version))
    assert (result.minor, result.tested, result.supported) == (minor, tested, supported)
    assert result.git_version == version
    assert version in result.note and where in result.note
    assert {
        need.feature for need in NEEDS if any(need.feature in s for s in result.missing)
    } == missing_features
    for sentence in result.missing:
        assert sentence.endswith(f"this cluster runs {version}")


def test_a_missing_feature_names_what_needs_it_the_minor_and_when_it_was_on_by_default() -> None:
    (sentence,) = [s for s in assess(answer("1", "29", "v1.29.3")).missing if "scheduling gates" in s]
    assert sentence == (
        "gate mode (a staggering policy with mode: gate) needs pod scheduling gates (spec.schedulingGates), "
        "GA in Kubernetes 1.30 (on by default since 1.27 unless the feature gate PodSchedulingReadiness is "
        "off); this cluster runs v1.29.3"
    )
    (policy,) = [s for s in assess(answer("1", "29")).missing if "ValidatingAdmissionPolicy" in s]
    assert "off by default before that" in policy and "this cluster runs v1.29" in policy


@pytest.mark.parametrize(
    "info",
    [
        pytest.param({}, id="empty"),
        pytest.param(answer("", "", "v0.0.0-master+$Format:%H$"), id="unstamped"),
    ],
)
def test_an_unreadable_answer_is_unknown_and_untested(info: dict[str, object]) -> None:
    result = assess(info)
    assert (result.minor, result.tested, result.missing, result.supported) == (None, False, (), None)
    assert "unknown" in result.note and kubeversions.format_tested() in result.note


def test_the_version_shown_is_bounded_and_printable() -> None:
    assert assess(answer("1", "35", "v1.35.0-" + "x" * 500)).git_version == "v1.35.0-" + "x" * 56
    assert assess(answer("1", "35", "v1.35\n\x1b[31m")).git_version == "v1.35"


@given(st.integers(min_value=1, max_value=3), st.integers(min_value=0, max_value=60))
def test_missing_is_empty_exactly_when_the_minor_has_every_need(major: int, minor: int) -> None:
    result = assess(answer(str(major), f"{minor}+", f"v{major}.{minor}.0"))
    assert result.minor == (major, minor)
    assert (not result.missing) == ((major, minor) >= FULL)
    assert len(result.missing) == sum((major, minor) < need.ga for need in NEEDS)
    assert result.tested == (OLDEST_TESTED <= (major, minor) <= NEWEST_TESTED)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.dictionaries(
        st.sampled_from(["major", "minor", "gitVersion", "platform"]) | st.text(max_size=5), _JSON, max_size=4
    )
)
def test_reading_never_raises_on_any_answer(info: dict[str, object]) -> None:
    minor = parse_version(info)
    result = assess(info)
    assert result.minor == minor
    assert minor is None or minor[0] >= 1
    assert len(result.git_version) <= 64 and result.git_version.isprintable()


@given(
    st.from_regex(r"\A(v?[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,3})?([-+][a-z0-9.]{0,12})?)?\Z"),
    st.from_regex(r"\A[0-9]{0,3}\+?\Z"),
)
def test_the_fields_win_over_the_git_version(git_version: str, minor: str) -> None:
    info = answer("1", minor, git_version)
    digits = minor.rstrip("+")
    if digits:
        assert parse_version(info) == (1, int(digits))
    else:
        assert parse_version(info) == parse_version({"gitVersion": git_version})


def test_the_tested_range_is_what_ci_runs_and_the_chart_says() -> None:
    """OLDEST_TESTED is .ci/run's older minor and the chart's kubeVersion; NEWEST_TESTED is the test bed's
    default build (testbed/go.mod)."""
    ci = (ROOT / ".ci" / "run").read_text()
    oldest = re.search(r"^OLDEST_KUBE_VERSION=(\d+)\.(\d+)$", ci, re.MULTILINE)
    assert oldest is not None, ".ci/run names no OLDEST_KUBE_VERSION"
    assert (int(oldest[1]), int(oldest[2])) == OLDEST_TESTED
    newest = re.search(
        r"^\s*k8s\.io/kubernetes v(\d+)\.(\d+)\.", (ROOT / "testbed" / "go.mod").read_text(), re.M
    )
    assert newest is not None
    assert (int(newest[1]), int(newest[2])) == NEWEST_TESTED
    chart = (ROOT / "charts" / "stagger" / "Chart.yaml").read_text()
    assert f'kubeVersion: ">={OLDEST_TESTED[0]}.{OLDEST_TESTED[1]}.0-0"' in chart
