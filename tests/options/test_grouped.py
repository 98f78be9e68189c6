"""Settings grouped by part (`stagger.options.grouped`, `regrouped`): built from flat values named like the
fields wherever they live, defaults kept, an unknown name refused, a variant changing only what it names;
and every option of lockd, the controller and the init client lands in a field of its settings."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import pytest

from initclient import settings as initclient_settings
from lockd import settings as lockd_settings
from stagger.options import grouped, regrouped
from webhook import settings as controller_settings


@dataclass(frozen=True)
class Server:
    host: str = "127.0.0.1"
    port: int = 80


@dataclass(frozen=True)
class Node:
    name: str


@dataclass(frozen=True)
class Example:
    node: Node
    verbose: bool = False
    server: Server = Server()


def test_flat_values_fill_the_groups_and_keep_the_defaults() -> None:
    built = grouped(Example, {"name": "n1", "port": 8080})
    assert built == Example(node=Node(name="n1"), server=Server(port=8080))


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(TypeError, match="no setting colour"):
        grouped(Example, {"name": "n1", "colour": "red"})
    with pytest.raises(TypeError, match="no setting colour"):
        regrouped(Example(node=Node(name="n1")), colour="red")


def test_a_variant_changes_only_what_it_names() -> None:
    base = grouped(Example, {"name": "n1", "host": "0.0.0.0"})
    changed = regrouped(base, port=9, verbose=True)
    assert changed == Example(node=Node(name="n1"), verbose=True, server=Server(host="0.0.0.0", port=9))
    assert base.server.port == 80  # frozen: the original is unchanged


@pytest.mark.parametrize(
    ("module", "renamed", "required"),
    [
        # Options whose value is split or turned before it is a setting.
        pytest.param(
            lockd_settings, {"listen", "probe_listen", "no_events", "no_token_keys"}, {}, id="lockd"
        ),
        pytest.param(
            controller_settings,
            {"listen", "probe_listen", "no_leader_elect", "no_pod_token"},
            {"image": "stagger:1"},
            id="controller",
        ),
    ],
)
def test_every_option_lands_in_a_field(module: Any, renamed: set[str], required: dict[str, str]) -> None:
    for option in module.OPTIONS:
        if option.dest not in renamed:
            grouped(module.Settings, {**required, option.dest: "given"})  # TypeError if it has no field


def test_the_init_clients_options_are_its_settings_fields() -> None:
    names = {f.name for f in fields(initclient_settings.Settings)}
    assert {option.dest for option in initclient_settings._OPTIONS} <= names
