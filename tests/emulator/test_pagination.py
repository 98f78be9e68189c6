"""List pagination: limit/continue in key order, remainingItemCount, the list resourceVersion kept
across pages, selectors combined with pages, and a clear 400 for a corrupt continue token."""

from __future__ import annotations

from tests.emulator.conftest import Core, Http


def test_pages_cover_everything_once_in_key_order(core: Core) -> None:
    core.create_namespace({"metadata": {"name": "b-ns"}})
    for name in ("c", "a", "e", "b", "d"):
        core.create_namespaced_config_map("default", {"metadata": {"name": name}})
    core.create_namespaced_config_map("b-ns", {"metadata": {"name": "z"}})
    first = core.list_config_map_for_all_namespaces(limit=2)
    assert [(c.metadata.namespace, c.metadata.name) for c in first.items] == [("b-ns", "z"), ("default", "a")]
    assert first.metadata.remaining_item_count == 4
    second = core.list_config_map_for_all_namespaces(limit=2, _continue=first.metadata._continue)
    third = core.list_config_map_for_all_namespaces(limit=2, _continue=second.metadata._continue)
    assert [c.metadata.name for c in second.items] == ["b", "c"]
    assert [c.metadata.name for c in third.items] == ["d", "e"]
    assert not third.metadata._continue and third.metadata.remaining_item_count is None
    assert (
        first.metadata.resource_version == second.metadata.resource_version == third.metadata.resource_version
    )


def test_pages_with_a_selector(core: Core) -> None:
    for i in range(6):
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": f"c{i}", "labels": {"even": str(i % 2 == 0)}}}
        )
    page = core.list_namespaced_config_map("default", label_selector="even=True", limit=2)
    assert [c.metadata.name for c in page.items] == ["c0", "c2"]
    assert page.metadata.remaining_item_count is None  # counted only for lists without selectors
    rest = core.list_namespaced_config_map(
        "default", label_selector="even=True", limit=2, _continue=page.metadata._continue
    )
    assert [c.metadata.name for c in rest.items] == ["c4"]


def test_exact_page_size_has_no_continue(core: Core) -> None:
    for i in range(2):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    page = core.list_namespaced_config_map("default", limit=2)
    assert len(page.items) == 2 and not page.metadata._continue


def test_corrupt_continue_is_400(http: Http) -> None:
    response = http.get("/api/v1/configmaps?limit=1&continue=garbage!!")
    assert response.status_code == 400
    assert response.json()["message"].startswith("invalid continue token: continue key is not valid")
