"""`python -m initclient`: wait for a start-up slot from lockd, then exit 0.

It exits 0 also when it cannot get one (fail-open): bad config, a rejected request, max-wait over.
Only SIGTERM/SIGINT (the pod is going away) ends it with another code, 128 + the signal number.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from types import FrameType

from initclient.client import DeadlinePassed, Finish, fetch_lock, wait_for_slot
from initclient.settings import ConfigError, Settings, parse_settings
from stagger.contracts.failopen import FailOpenCause, format_outcome

logger = logging.getLogger(__name__)

# Each request's deadline ends the wait at max-wait; the timer is only a backstop for what that cannot
# bound (a stuck write to the log, a token file on a hung mount), so it lets the deadlines go first.
BACKSTOP_GRACE = 1.0


class Terminated(BaseException):
    """SIGTERM/SIGINT arrived; a BaseException so that no library code swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _LineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            message = f"{record.levelname.lower()}: {message}"
        return f"stagger: {message}"


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LineFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def _raise_deadline(signum: int, frame: FrameType | None) -> None:
    raise DeadlinePassed()


def run(settings: Settings) -> int:
    """Wait for the slot with real HTTP, clock and sleep; the exit code."""
    tokens = TokenFile(settings.pod_token_file)
    signal.signal(signal.SIGALRM, _raise_deadline)
    signal.setitimer(signal.ITIMER_REAL, settings.max_wait + BACKSTOP_GRACE)
    try:
        finish = wait_for_slot(
            settings=settings,
            fetch=lambda request: fetch_lock(
                lockd_url=settings.lockd_url,
                request=request,
                wall_now=time.time(),
                token=tokens.read(),
            ),
            clock=time.monotonic,
            sleep=time.sleep,
            rng=random.random,
        )
    except DeadlinePassed:
        # Only when the timer fires outside the loop's own waits (e.g. while logging).
        reason = f"proceeding without a start-up slot for {settings.namespace}/{settings.name}: max-wait is over (fail-open)"
        logger.warning("%s", reason)
        finish = Finish(exit_code=0, granted=False, cause="maxWait", reason=reason)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if finish.release_token and settings.release_token_file:
        _write_token(settings.release_token_file, finish.release_token)
    write_outcome(settings.termination_log, cause=finish.cause, reason=finish.reason)
    return finish.exit_code


class TokenFile:
    """The pod's service-account token, read at each request (the kubelet rotates it). Unreadable, it is
    left out with one warning: lockd then decides by the pod's name and uid alone, or refuses (403) when
    it requires tokens, and the pod fails open as for any rejection."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._warned = False

    def read(self) -> str | None:
        if not self._path:
            return None
        try:
            with open(self._path, encoding="ascii") as handle:
                return handle.read().strip() or None
        except (OSError, UnicodeDecodeError) as err:
            if not self._warned:
                logger.warning("cannot read the pod's token %s: %s (asking without it)", self._path, err)
                self._warned = True
            return None


def write_outcome(path: str, *, cause: FailOpenCause | None, reason: str) -> None:
    """The outcome for the controller, through the kubelet (stagger.contracts.failopen); a failure to
    write it must not fail the pod."""
    if not path:
        return
    try:
        # Never created here: the kubelet creates the file before the container starts, and run outside
        # a container (a test, a person trying it) the client must not leave a /dev/termination-log behind.
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_TRUNC), "w", encoding="ascii") as handle:
            handle.write(format_outcome(cause=cause, reason=reason))
    except FileNotFoundError:
        logger.debug("no %s to write the outcome to (not in a container)", path)
    except OSError as err:
        logger.warning("could not write the outcome to %s: %s (stagger will not see why)", path, err)


def _write_token(path: str, token: str) -> None:
    """The token for whoever gives the slot back; a failure to write it must not fail the pod."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token)
    except OSError as err:
        logger.warning(
            "could not write the release token to %s: %s (the slot ends at holdTimeout)", path, err
        )


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    _configure_logging()
    signal.signal(signal.SIGTERM, _raise_terminated)
    signal.signal(signal.SIGINT, _raise_terminated)
    settings: Settings | None = None
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ if env is None else env)
        return run(settings)
    except ConfigError as exc:
        reason = f"invalid configuration ({exc}); proceeding without a start-up slot (fail-open)"
        logger.error("%s", reason)
        write_outcome(exc.termination_log, cause="badConfig", reason=reason)
        return 0
    except Terminated as exc:
        target = f" for {settings.namespace}/{settings.name}" if settings is not None else ""
        logger.info("stopped by %s while waiting%s", signal.Signals(exc.signum).name, target)
        return 128 + exc.signum


if __name__ == "__main__":
    # What is imported by now lives until the exit: frozen, the collector does not walk it again, neither in
    # the collections of the wait nor in the one at exit, which took 10 ms of the 55 ms of CPU of a granted run.
    gc.freeze()
    sys.exit(main())
