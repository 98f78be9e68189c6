"""The kubeconfig the emulator writes for its clients: cluster, user and context all named "sim"."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.emulator.server import ApiServerThread


def test_kubeconfig_names_everything_sim(server: ApiServerThread, tmp_path: Path) -> None:
    path = tmp_path / "kc"
    server.write_kubeconfig(path)
    loaded = yaml.safe_load(path.read_text())
    assert loaded["current-context"] == "sim"
    assert loaded["clusters"] == [{"name": "sim", "cluster": {"server": server.url}}]
    assert loaded["users"] == [{"name": "sim", "user": {"token": "sim"}}]
    assert loaded["contexts"][0]["name"] == "sim"
    assert (
        loaded["contexts"][0]["context"]["cluster"] == "sim"
        and loaded["contexts"][0]["context"]["user"] == "sim"
    )
