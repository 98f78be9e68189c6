"""A cheaper launch of the init client processes: a fork server.

Started with exec (``python -m initclient``), every init client pays the interpreter's start-up and its
imports (``requests`` and urllib3 above all): about 0.25 CPU-seconds and 25-30 MB each on this
machine. A real cluster pays that on each pod's own node; the simulated cluster pays it on one machine,
so a 3,000-pod herd needed some 750 CPU-seconds of launches and more memory than the machine has for the
init clients waiting at once. The fork server imports the init client once, then forks a child per
launch that runs the real init client's ``main`` (the same code, arguments and environment as with exec)
in a process of its own, with its own pid, exit code and signals: a few milliseconds and about a megabyte
(pages shared copy-on-write) each.

Protocol, one Unix-socket connection per launch: the client sends one line of JSON ``{"args": [...],
"env": {...}, "nice": n}``; the child writes its pid on a line, then its output (stdout and stderr) goes
to the connection; once the server has reaped it, it sends ``\\0EXIT <code>\\n`` (the code as
``os.waitstatus_to_exitcode``: negative for a signal, as asyncio's ``returncode``) and closes the
connection.

Server: ``python -m sim.cluster.launchers.forkserver SOCKET`` prints ``ready`` once it listens. Client:
``ForkServer`` (start, spawn, stop) and ``ForkedProcess`` (what the kubelet needs of a process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from sim.cluster.launchers.stopping import stop_process

TRAILER = b"\0EXIT "


class ForkedProcess:
    """A forked init client, seen from the simulator: pid, returncode, signals, output, wait."""

    def __init__(self, pid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._writer = writer
        self._output = b""
        self._done = asyncio.get_running_loop().create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        data = await reader.read()
        cut = data.rfind(TRAILER)
        if cut >= 0:
            self._output = data[:cut]
            try:
                self.returncode = int(data[cut + len(TRAILER) :].strip())
            except ValueError:
                self.returncode = -signal.SIGKILL
        else:  # the server went away: the child is gone with it, or will be
            self._output = data
            self.returncode = -signal.SIGKILL
        self._writer.close()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        await asyncio.shield(self._done)
        assert self.returncode is not None
        return self.returncode

    async def communicate(self) -> tuple[bytes, None]:
        await asyncio.shield(self._done)
        return self._output, None


class ForkServer:
    """The server process, and launches through it."""

    def __init__(self, *, socket_path: Path, python: str = sys.executable, env: Mapping[str, str]) -> None:
        self.socket_path = socket_path
        self._python = python
        self._env = dict(env)
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self, *, ready_within: float = 30.0) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            self._python,
            "-m",
            "sim.cluster.launchers.forkserver",
            str(self.socket_path),
            env=self._env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self._proc.stdout is not None
        line = await asyncio.wait_for(self._proc.stdout.readline(), timeout=ready_within)
        if line.strip() != b"ready":
            raise RuntimeError(f"the init client fork server did not start (said {line!r})")

    async def spawn(self, args: Sequence[str], *, env: Mapping[str, str], nice: int) -> ForkedProcess:
        reader, writer = await asyncio.open_unix_connection(str(self.socket_path), limit=2**20)
        writer.write(json.dumps({"args": list(args), "env": dict(env), "nice": nice}).encode() + b"\n")
        await writer.drain()
        line = await reader.readline()
        try:
            pid = int(line)
        except ValueError:
            writer.close()
            raise RuntimeError(f"the fork server did not start the init client (said {line!r})") from None
        return ForkedProcess(pid, reader, writer)

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            await stop_process(proc, grace=5)


# ------------------------------------------------------------------------------------------ server


def _child(conn: socket.socket, request: bytes, inherited: Sequence[socket.socket]) -> None:
    """In the forked child: become the init client and never return. ``inherited``: the server's sockets,
    the other children's connections among them (kept open here, they would hold back those children's
    end of output)."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        for sock in inherited:
            sock.close()
        spec = json.loads(request)
        if spec.get("nice"):
            os.nice(int(spec["nice"]))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(conn.fileno(), 1)
        os.dup2(conn.fileno(), 2)
        os.close(null)
        conn.close()
        os.write(1, f"{os.getpid()}\n".encode())
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in spec["env"].items()})
        import random

        random.seed()  # the parent's generator state is every child's: jitter must differ
        from initclient.__main__ import main

        sys.argv = ["initclient", *spec["args"]]
        code = main(spec["args"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # the child must end here, whatever happened
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(path: str) -> None:
    import gc
    import selectors

    import initclient.__main__  # noqa: F401 - imported once, here: what every child saves

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(512)
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w.fileno())
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    children: dict[int, socket.socket] = {}
    gc.collect()
    gc.freeze()  # the children's collections must not touch (and copy) the parent's objects
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    print("ready", flush=True)
    while not stop:
        for key, _ in selector.select(timeout=1.0):
            if key.data == "accept":
                conn, _addr = listener.accept()
                conn.setblocking(True)
                request = _read_line(conn)
                if request is None:
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(conn, request, [listener, wake_r, wake_w, *children.values()])
                children[pid] = conn
            else:
                with contextlib.suppress(BlockingIOError):
                    while wake_r.recv(4096):
                        pass
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid in children:
                conn = children.pop(pid)
                with contextlib.suppress(OSError):
                    conn.sendall(TRAILER + f"{os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _read_line(conn: socket.socket) -> bytes | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data


if __name__ == "__main__":
    serve(sys.argv[1])
