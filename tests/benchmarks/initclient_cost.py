"""What the init client costs a pod (issue 39): its memory while it waits in a long poll, and its CPU and
wall time from exec to exit when lockd grants at once.

`python -m tests.benchmarks.initclient_cost [--grants 5] [--python PATH] [--python-arg=-I ...]
[--pod-startup-lock-src DIR] [--json]`

With `--pod-startup-lock-src` (a checkout or a bare clone of github.com/serhii-samoilenko/pod-startup-lock), its
Go init client is built from that source as its Makefile builds it (`CGO_ENABLED=0 go build`, its one file
`init/main.go`; the repository predates Go modules, so a throwaway go.mod is written beside it) and measured in
the same run against the same lockd, which serves pod-startup-lock's anonymous `GET /`: its grant is a 200 to
its first `GET /`, and it waits by asking again every second (its `--pause` default), not in a long poll.

Both against a real standalone `python -m lockd` on 127.0.0.1 (node policy: maxConcurrent `slots`,
holdTimeout 1h), with the child started as admission injects it (`python -m initclient`, the injected
environment: POD_NAME, POD_NAMESPACE, POD_UID, STAGGER_LOCKD_URL, STAGGER_MAX_WAIT, STAGGER_UNREACHABLE_WAIT)
plus a termination log that exists, as the kubelet's does:

- grant: lockd has a free slot; the child's user+sys CPU is its rusage (`os.wait4`), wall is from just before
  the spawn to its exit. Each grant keeps its slot (holdTimeout 1h), so a run takes one of `slots`.
- waiting: every slot is taken (`fill_slots`), so lockd answers 423. The child long-polls for a second
  (`--poll-wait 1s`) so that it has had one 423 answer (decoded, logged) before it is measured in its next long
  poll, the one it would sit in for most of its life; VmRSS and VmHWM are read from /proc/PID/status once
  lockd counts it in its queue again. Then it is stopped with SIGTERM (exit 143).

The figures are of this checkout's venv python by default, whose site imports setuptools' editable finder
(pathlib, re, ...: 2 MiB and 15 ms) before anything of stagger. The image's python has no such thing in its
site: `--python` with the python of a bare venv (`python3 -m venv --without-pip DIR`; this checkout is put on
PYTHONPATH) is closer to it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.policies import limit_policy
from tests.processes import clean_env, free_port, get, running_lockd

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "cost"
# Bounds on things that take a fraction of a second; only a broken setup comes near them.
STEP_LIMIT = 20.0
# What a child wrote after the line `_read_line` returned, by pid, for its next call.
_PENDING: dict[int, bytes] = {}


@dataclass(frozen=True)
class GrantCost:
    """One init client run that lockd granted at once."""

    user_seconds: float
    sys_seconds: float
    wall_seconds: float

    @property
    def cpu_seconds(self) -> float:
        return self.user_seconds + self.sys_seconds


@dataclass(frozen=True)
class WaitingCost:
    """One init client in a long poll on a full node."""

    rss_kib: int  # VmRSS while it waits
    hwm_kib: int  # VmHWM: its peak so far


@dataclass(frozen=True)
class Cost:
    command: tuple[str, ...]
    grants: tuple[GrantCost, ...]
    waiting: WaitingCost

    @property
    def median_grant(self) -> GrantCost:
        ordered = sorted(self.grants, key=lambda grant: grant.cpu_seconds)
        return ordered[len(ordered) // 2]


def command(*, python: str = sys.executable, python_args: Sequence[str] = ()) -> tuple[str, ...]:
    """The init client's command as admission injects it, run with `python` (this venv's by default)."""
    return (python, *python_args, "-m", "initclient")


def injected_env(*, lockd_port: int, name: str, termination_log: Path, **extra: str) -> dict[str, str]:
    """The environment admission gives the init container (webhook/admission/inject.py), on loopback."""
    env = clean_env(
        POD_NAME=name,
        POD_NAMESPACE=NAMESPACE,
        POD_UID=str(uuid.uuid5(uuid.NAMESPACE_URL, f"stagger-cost/{name}")),
        HOST_IP="127.0.0.1",
        STAGGER_LOCKD_URL=f"http://127.0.0.1:{lockd_port}",
        STAGGER_MAX_WAIT="10m",
        STAGGER_UNREACHABLE_WAIT="1m",
        STAGGER_TERMINATION_LOG=str(termination_log),
        **extra,
    )
    # The checkout first, so that `-m initclient` is this tree's also without the editable install (`-I`
    # ignores it; the venv's editable finder maps to this tree as well).
    env["PYTHONPATH"] = str(ROOT)
    return env


def _spawn(argv: Sequence[str], *, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(argv), env=env, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _reap(proc: subprocess.Popen[bytes]) -> tuple[int, resource.struct_rusage]:
    """Wait for the child with its rusage; Popen is told, so it does not wait again."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage


def measure_grant(
    *, lockd_port: int, name: str, python: str = sys.executable, python_args: Sequence[str] = ()
) -> GrantCost:
    """One run of the init client that lockd grants at once (a slot must be free)."""
    with tempfile.NamedTemporaryFile(prefix="termination-log-") as log:
        env = injected_env(lockd_port=lockd_port, name=name, termination_log=Path(log.name))
        started = time.perf_counter()
        proc = _spawn(command(python=python, python_args=python_args), env=env)
        code, usage = _reap(proc)
        wall = time.perf_counter() - started
        assert proc.stderr is not None
        lines = proc.stderr.read().decode(errors="replace").splitlines()
        proc.stderr.close()
        outcome = Path(log.name).read_text()
    granted = any(line.startswith("stagger: granted start-up slot") for line in lines)
    if code != 0 or not granted or json.loads(outcome) != {"slot": "granted"}:
        raise RuntimeError(
            f"the init client was not granted a slot (exit {code}, outcome {outcome!r}): {lines}"
        )
    # Not ru_maxrss: it counts the pages of this process that the child shared before its exec.
    return GrantCost(user_seconds=usage.ru_utime, sys_seconds=usage.ru_stime, wall_seconds=wall)


def fill_slots(*, lockd_port: int, limit: int = 1000) -> int:
    """Takes every free slot of lockd (as pods `holder-N`), so the next ask gets 423; how many it took."""
    for taken in range(limit):
        status, body = get(
            f"http://127.0.0.1:{lockd_port}/v1/lock?namespace={NAMESPACE}&name=holder-{taken}&wait=0",
            timeout=STEP_LIMIT,
        )
        if status == 423:
            return taken
        if status != 200:
            raise RuntimeError(f"lockd answered {status} to a plain ask: {body}")
    raise RuntimeError(f"lockd still grants after {limit} slots were taken")


def _waiting_names(lockd_port: int) -> list[str]:
    status, body = get(f"http://127.0.0.1:{lockd_port}/status", timeout=STEP_LIMIT)
    if status != 200:
        raise RuntimeError(f"lockd /status answered {status}: {body}")
    return [f"{entry.get('namespace')}/{entry.get('name')}" for entry in json.loads(body).get("queue", [])]


def _read_line(proc: subprocess.Popen[bytes], *, starting: str, within: float, containing: str = "") -> str:
    """The child's next stderr line that starts with `starting` and has `containing` in it (an event: its
    pipe is awaited). Lines after it stay unread in the pipe."""
    assert proc.stderr is not None
    deadline = time.monotonic() + within
    buffered = _PENDING.pop(proc.pid, b"")
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stderr, selectors.EVENT_READ)
        while True:
            *complete, buffered = buffered.split(b"\n")
            for index, raw in enumerate(complete):
                line = raw.decode(errors="replace")
                if line.startswith(starting) and containing in line:
                    # What followed it in the chunk is put back for the next call.
                    _PENDING[proc.pid] = b"\n".join([*complete[index + 1 :], buffered])
                    return line
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise RuntimeError(f"no line {starting!r} from the init client within {within:g}s")
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"the init client exited ({proc.wait()}) before saying {starting!r}")
            buffered += chunk


def _until_queued(lockd_port: int, pod: str, *, within: float) -> None:
    """lockd has no event for 'this pod is in the queue' that a client could await: /status, bounded."""
    deadline = time.monotonic() + within
    while pod not in _waiting_names(lockd_port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"lockd did not queue {pod} within {within:g}s")
        time.sleep(0.02)


def _status_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def measure_waiting(
    *, lockd_port: int, name: str = "waiter", python: str = sys.executable, python_args: Sequence[str] = ()
) -> WaitingCost:
    """The init client's memory in its second long poll on a node whose slots are all taken."""
    with tempfile.NamedTemporaryFile(prefix="termination-log-") as log:
        env = injected_env(
            lockd_port=lockd_port, name=name, termination_log=Path(log.name), STAGGER_POLL_WAIT="1s"
        )
        proc = _spawn(command(python=python, python_args=python_args), env=env)
        try:
            _read_line(proc, starting="stagger: waiting for a start-up slot", within=STEP_LIMIT)
            _until_queued(lockd_port, f"{NAMESPACE}/{name}", within=STEP_LIMIT)
            fields = _status_kib(proc.pid)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=STEP_LIMIT)
            if proc.stderr is not None:
                proc.stderr.close()
    if code != 128 + signal.SIGTERM:
        raise RuntimeError(f"the waiting init client ended with {code}, not 143 (SIGTERM)")
    return WaitingCost(rss_kib=fields["VmRSS"], hwm_kib=fields["VmHWM"])


@contextmanager
def lockd_with_slots(*, slots: int) -> Iterator[int]:
    """A standalone lockd on 127.0.0.1 whose node allows `slots` pods at once, held for 1h; its port."""
    with tempfile.TemporaryDirectory(prefix="initclient-cost-") as tmp:
        policies = Path(tmp) / "policies.yaml"
        policies.write_text(limit_policy(slots, hold="1h"))
        port = free_port()
        with running_lockd("--policies", str(policies), port=port):
            yield port


def measure(*, grants: int = 5, python: str = sys.executable, python_args: Sequence[str] = ()) -> Cost:
    """`grants` granted runs (one warm-up first, not counted: it fills the page cache and pycache), then one
    waiting run, against one lockd."""
    with lockd_with_slots(slots=grants + 1) as port:
        measure_grant(lockd_port=port, name="warm-up", python=python, python_args=python_args)
        runs = tuple(
            measure_grant(lockd_port=port, name=f"granted-{i}", python=python, python_args=python_args)
            for i in range(grants)
        )
        fill_slots(lockd_port=port)
        waiting = measure_waiting(lockd_port=port, python=python, python_args=python_args)
    return Cost(command=command(python=python, python_args=python_args), grants=runs, waiting=waiting)


def build_pod_startup_lock(*, source: Path, out: Path) -> Path:
    """pod-startup-lock's init client built from `source` into `out` (its Makefile's flags); the binary."""
    if (source / "init" / "main.go").is_file():
        main_go = (source / "init" / "main.go").read_text()
    else:  # a bare clone (what `git clone --mirror` or a fetched snapshot gives)
        main_go = subprocess.run(
            ["git", "--git-dir", str(source), "show", "HEAD:init/main.go"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    work = out / "pod-startup-lock-init"
    work.mkdir(parents=True, exist_ok=True)
    (work / "main.go").write_text(main_go)
    (work / "go.mod").write_text("module pod-startup-lock/init\n\ngo 1.21\n")
    env = {**os.environ, "CGO_ENABLED": "0", "GOOS": "linux", "GOFLAGS": "-mod=mod"}
    subprocess.run(["go", "build", "-a", "-o", "init", "."], cwd=work, env=env, check=True)
    return work / "init"


def _peer_grant(binary: Path, *, lockd_port: int) -> GrantCost:
    started = time.perf_counter()
    proc = _spawn([str(binary), "--host", "127.0.0.1", "--port", str(lockd_port)], env=clean_env())
    code, usage = _reap(proc)
    wall = time.perf_counter() - started
    assert proc.stderr is not None
    lines = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if code != 0 or "Lock acquired" not in lines:
        raise RuntimeError(f"pod-startup-lock's init client was not granted (exit {code}): {lines}")
    return GrantCost(user_seconds=usage.ru_utime, sys_seconds=usage.ru_stime, wall_seconds=wall)


def _peer_waiting(binary: Path, *, lockd_port: int) -> WaitingCost:
    """Its memory once lockd has said 423 twice: in its second pause, where it spends its wait."""
    proc = _spawn([str(binary), "--host", "127.0.0.1", "--port", str(lockd_port)], env=clean_env())
    try:
        for _ in range(2):
            _read_line(proc, starting="", containing="Lock not acquired", within=STEP_LIMIT)
        fields = _status_kib(proc.pid)
    finally:
        proc.kill()
        proc.wait(timeout=STEP_LIMIT)
        if proc.stderr is not None:
            proc.stderr.close()
    return WaitingCost(rss_kib=fields["VmRSS"], hwm_kib=fields["VmHWM"])


def measure_pod_startup_lock(*, binary: Path, grants: int = 5) -> Cost:
    """pod-startup-lock's Go init client: `grants` granted runs after a warm-up, then one waiting."""
    with lockd_with_slots(slots=grants + 1) as port:
        # Anonymous slots last their `duration` (lockd's holdTimeout here, 1h): each run keeps one.
        _peer_grant(binary, lockd_port=port)
        runs = tuple(_peer_grant(binary, lockd_port=port) for _ in range(grants))
        fill_slots(lockd_port=port)
        waiting = _peer_waiting(binary, lockd_port=port)
    return Cost(command=(str(binary), "--host", "127.0.0.1", "--port", "PORT"), grants=runs, waiting=waiting)


def table(costs: Sequence[Cost]) -> str:
    """One row per command: RSS and peak while waiting, the median grant's CPU (and the spread) and wall."""
    header = ("command", "waiting RSS", "waiting HWM", "grant CPU (user+sys)", "CPU min..max", "grant wall")
    rows = [header]
    for cost in costs:
        grant = cost.median_grant
        cpus = sorted(run.cpu_seconds * 1000 for run in cost.grants)
        python = "python" if cost.command[0] == sys.executable else Path(cost.command[0]).name
        shown = " ".join([python, *cost.command[1:]])
        rows.append(
            (
                shown,
                f"{cost.waiting.rss_kib / 1024:.1f} MiB",
                f"{cost.waiting.hwm_kib / 1024:.1f} MiB",
                f"{grant.cpu_seconds * 1000:.0f} ms ({grant.user_seconds * 1000:.0f}+{grant.sys_seconds * 1000:.0f})",
                f"{cpus[0]:.0f}..{cpus[-1]:.0f} ms",
                f"{grant.wall_seconds * 1000:.0f} ms",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.initclient_cost", description=__doc__)
    parser.add_argument("--grants", type=int, default=5, help="granted runs per command (median shown)")
    parser.add_argument(
        "--python-arg",
        action="append",
        default=[],
        help="an interpreter flag for the measured command (repeat; e.g. --python-arg=-I); "
        "without any, the plain command and (with this venv's python) `-I` are both measured",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter to run the init client with (default: this venv's); this checkout is on its "
        "PYTHONPATH, so a bare venv of the same python is the image's case (no editable install in its site)",
    )
    parser.add_argument(
        "--pod-startup-lock-src",
        type=Path,
        default=None,
        help="a checkout (or bare clone) of pod-startup-lock: its Go init client is built and measured too",
    )
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    args = parser.parse_args(argv)
    # `-I` leaves PYTHONPATH out: only this venv, whose editable install maps to this checkout, finds initclient.
    isolated = [("-I",)] if args.python == sys.executable else []
    variants = [tuple(args.python_arg)] if args.python_arg else [(), *isolated]
    costs = [measure(grants=args.grants, python=args.python, python_args=variant) for variant in variants]
    if args.pod_startup_lock_src is not None:
        with tempfile.TemporaryDirectory(prefix="pod-startup-lock-") as tmp:
            binary = build_pod_startup_lock(source=args.pod_startup_lock_src, out=Path(tmp))
            costs.append(measure_pod_startup_lock(binary=binary, grants=args.grants))
    if args.json:
        print(json.dumps([{**asdict(cost), "command": list(cost.command)} for cost in costs], indent=2))
    else:
        print(table(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
