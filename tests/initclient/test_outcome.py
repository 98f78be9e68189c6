"""The init client's outcome in its termination message (stagger.contracts.failopen), on the real
`python -m initclient`: a grant says so; each way of starting without a slot names its cause (lockd
unreachable, lockd's rejection, its own bad configuration) with the line it logged; with no file at the
path (not in a container) nothing is created; and the message never passes the kubelet's 4096 bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stagger.contracts.failopen import CAUSES, MESSAGE_LIMIT, FailOpenCause, format_outcome, read_outcome
from tests.initclient.process import Answer, FakeLockd, environment, run

pytestmark = pytest.mark.slow


def _log(tmp_path: Path) -> Path:
    """What the kubelet does before the container starts: an empty file at the terminationMessagePath."""
    path = tmp_path / "termination-log"
    path.write_text("")
    return path


async def test_a_grant_says_granted(lockd: FakeLockd, tmp_path: Path) -> None:
    log = _log(tmp_path)
    result = await run(environment(lockd.url, STAGGER_TERMINATION_LOG=str(log)))
    assert result.code == 0
    assert read_outcome(log.read_text()) == {"slot": "granted"}


@pytest.mark.parametrize(
    ("answer", "cause", "says"),
    [
        pytest.param(None, "lockdUnreachable", "could not be reached all along", id="nothing listens"),
        pytest.param(
            Answer(403, {"error": "pod ns/pod is not on this node"}), "rejected", "HTTP 403", id="rejected"
        ),
    ],
)
async def test_no_slot_names_its_cause(
    lockd: FakeLockd,
    closed_url: str,
    tmp_path: Path,
    answer: Answer | None,
    cause: FailOpenCause,
    says: str,
) -> None:
    log = _log(tmp_path)
    if answer is not None:
        lockd.script = [answer]
    url = closed_url if answer is None else lockd.url
    env = environment(
        url, STAGGER_TERMINATION_LOG=str(log), STAGGER_MAX_WAIT="10m", STAGGER_UNREACHABLE_WAIT="1s"
    )
    result = await run(env)
    assert result.code == 0
    outcome = read_outcome(log.read_text())
    assert outcome is not None and outcome["slot"] == "none" and outcome.get("cause") == cause
    assert says in outcome.get("reason", "")
    assert outcome.get("reason", "") in "\n".join(result.lines)  # the line it logged, word for word


async def test_bad_configuration_names_its_cause(tmp_path: Path) -> None:
    log = _log(tmp_path)
    env = environment(None, STAGGER_TERMINATION_LOG=str(log), STAGGER_LOCKD_URL="ftp://nowhere")
    result = await run(env)
    assert result.code == 0
    outcome = read_outcome(log.read_text())
    assert outcome is not None and outcome.get("cause") == "badConfig"
    assert "STAGGER_LOCKD_URL" in outcome.get("reason", "")


async def test_no_file_no_message(closed_url: str, tmp_path: Path) -> None:
    missing = tmp_path / "not-mounted"
    env = environment(closed_url, STAGGER_TERMINATION_LOG=str(missing), STAGGER_UNREACHABLE_WAIT="1s")
    result = await run(env)
    assert result.code == 0
    assert not missing.exists()


@given(cause=st.sampled_from(CAUSES), reason=st.text(max_size=6000))
def test_a_message_fits_the_kubelet_and_reads_back(cause: FailOpenCause, reason: str) -> None:
    message = format_outcome(cause=cause, reason=reason)
    assert len(message.encode()) <= MESSAGE_LIMIT
    outcome = read_outcome(message)
    assert outcome is not None and outcome.get("cause") == cause
    kept = outcome.get("reason", "")
    assert kept == reason or (kept.endswith(" [cut]") and reason.startswith(kept.removesuffix(" [cut]")))
