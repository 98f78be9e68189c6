"""A container of an installed pod, run as a local process the way its kubelet would run it: the image's
entrypoint (read from docker/Dockerfile) with the container's command and args, the environment the
kubelet builds (downward API included, by sim's `containerenv`), and every mounted ConfigMap and Secret
written to a temporary directory that stands in for the container's file system.

What cannot be the same on loopback is mapped, and only that:
- a path under a mount in an env value or argument points into the temporary directory instead;
- a listen address `0.0.0.0:PORT` becomes the node's IP (a `hostPort`, as lockd's) or 127.0.0.1 on a
  free port (a pod IP's port; the caller routes the Service to it);
- the projected service-account token becomes `STAGGER_KUBECONFIG`: a kubeconfig holding a token of the
  pod's own ServiceAccount, bound to the pod (TokenRequest), so the API server authorizes every call
  against the chart's RBAC exactly as in the pod.
A flag or env name that the chart misspells reaches the process unchanged and fails it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sim.cluster.launchers.containerenv import command_line, resolve_env
from stagger.kube import CONFIGMAPS, Resource, RestClient
from tests.processes import free_port
from tests.tools import ROOT

SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
SECRETS = Resource("", "v1", "secrets", "Secret")
LISTEN_ANY = re.compile(r"^0\.0\.0\.0:(\d+)$")


def image_entrypoint(dockerfile: Path = ROOT / "docker" / "Dockerfile") -> list[str]:
    """The final stage's ENTRYPOINT (exec form), with `python` as this interpreter."""
    found = [line for line in dockerfile.read_text().splitlines() if line.startswith("ENTRYPOINT ")]
    assert found, f"{dockerfile} has no ENTRYPOINT"
    entrypoint: list[str] = json.loads(found[-1].removeprefix("ENTRYPOINT "))
    return [sys.executable if Path(part).name.startswith("python") else part for part in entrypoint]


@dataclass
class PodProcess:
    """One container of `pod` (an object read from the API server) as a process; `start()`, `stop()`."""

    pod: Mapping[str, Any]
    container: str
    node_name: str
    node_ip: str
    work_dir: Path
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    ports: dict[int, tuple[str, int]] = field(default_factory=dict)
    """containerPort → the address the process listens on for it."""
    process: asyncio.subprocess.Process | None = None

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def spec(self) -> Mapping[str, Any]:
        containers = self.pod["spec"]["containers"]
        [container] = [c for c in containers if c["name"] == self.container]
        return container  # type: ignore[no-any-return]

    def port(self, name: str) -> tuple[str, int]:
        """Where the process serves the container port called `name`."""
        [number] = [p["containerPort"] for p in self.spec.get("ports") or [] if p.get("name") == name]
        return self.ports[number]

    async def prepare(self, *, client: RestClient, server: str, ca_file: Path, token: str) -> None:
        """Builds argv and env: mounts written, listen addresses and the service account mapped."""
        root = self.work_dir / self.name
        mounts = await self._write_mounts(client, root)
        env = resolve_env(
            self.spec, self.pod, node_name=self.node_name, host_ip=self.node_ip, pod_ip="127.0.0.1"
        )
        host_ports = {p["containerPort"]: p.get("hostPort") for p in self.spec.get("ports") or []}
        for name, value in env.items():
            env[name] = self._listen(value, host_ports)
            env[name] = _remap(env[name], mounts)
        kubeconfig = root / "serviceaccount.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(_kubeconfig(server, ca_file, token)))
        env["STAGGER_KUBECONFIG"] = str(kubeconfig)
        argv = command_line(self.spec, env)
        if not self.spec.get("command"):
            argv = image_entrypoint() + argv
        self.argv = [_remap(part, mounts) for part in argv]
        self.env = env

    def _listen(self, value: str, host_ports: Mapping[int, int | None]) -> str:
        found = LISTEN_ANY.match(value)
        if not found:
            return value
        port = int(found.group(1))
        address = (self.node_ip, port) if host_ports.get(port) == port else ("127.0.0.1", free_port())
        self.ports[port] = address
        return f"{address[0]}:{address[1]}"

    async def _write_mounts(self, client: RestClient, root: Path) -> dict[str, Path]:
        namespace = str(self.pod["metadata"]["namespace"])
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in self.spec.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            if _service_account_volume(volume):
                continue  # replaced by STAGGER_KUBECONFIG (see the module's docstring)
            target = root / str(mount["mountPath"]).lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            if "configMap" in volume:
                source = await client.get(CONFIGMAPS, name=volume["configMap"]["name"], namespace=namespace)
                files = {k: v.encode() for k, v in (source.get("data") or {}).items()}
                items = volume["configMap"].get("items")
            elif "secret" in volume:
                source = await client.get(SECRETS, name=volume["secret"]["secretName"], namespace=namespace)
                files = {k: base64.b64decode(v) for k, v in (source.get("data") or {}).items()}
                items = volume["secret"].get("items")
            else:
                raise AssertionError(f"volume {mount['name']}: only configMap and secret volumes are mapped")
            if items:
                files = {item["path"]: files[item["key"]] for item in items}
            for path, data in files.items():
                (target / path).write_bytes(data)
            mounts[str(mount["mountPath"])] = target
        return mounts

    async def start(self, log: Path) -> None:
        with log.open("wb") as out:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                env=self.env,
                cwd=self.work_dir,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )

    async def stop(self) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        self.process.terminate()
        try:
            await asyncio.wait_for(self.process.wait(), 20)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


def _service_account_volume(volume: Mapping[str, Any]) -> bool:
    """The projected token volume the ServiceAccount admission plugin adds (`kube-api-access-*`)."""
    sources = (volume.get("projected") or {}).get("sources") or []
    return any("serviceAccountToken" in source for source in sources)


def _remap(value: str, mounts: Mapping[str, Path]) -> str:
    for mount_path, target in mounts.items():
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return str(target) + value[len(mount_path.rstrip("/")) :]
    return value


def _kubeconfig(server: str, ca_file: Path, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }


async def service_account_token(client: RestClient, pod: Mapping[str, Any]) -> str:
    """A token of the pod's ServiceAccount bound to the pod (TokenRequest), as the kubelet projects it."""
    meta = pod["metadata"]
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": 3600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        },
    }
    path = SERVICEACCOUNTS.path(
        namespace=meta["namespace"], name=pod["spec"]["serviceAccountName"], subresource="token"
    )
    answer = await client.request("POST", path, body=body)
    return str(answer["status"]["token"])
