"""The fleet's runtime state (`modelplane.driver.state`): one owner of `.modelplane/*.json`,
atomic writes in one place, the documents' formats, and another store behind it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelplane.autoscale import AutoscaleState
from modelplane.driver.state import FileStore, Orphan, RuntimeState, write_json_atomic


class MemoryStore:
    """Another store (as a shared one would be): documents in a dict."""

    def __init__(self) -> None:
        self.docs: dict[str, Any] = {}

    def load(self, name: str) -> Any | None:
        return json.loads(json.dumps(self.docs[name])) if name in self.docs else None

    def save(self, name: str, document: Any) -> None:
        self.docs[name] = json.loads(json.dumps(document))

    def delete(self, name: str) -> None:
        self.docs.pop(name, None)


def test_documents_keep_their_files_and_formats(tmp_path: Path) -> None:
    state = RuntimeState.at(tmp_path)
    state.set_unhealthy_since({"b": 2.0, "a": 1.0})
    state.set_routing({"b": "API unreachable"}, {"m-a1": "no pods yet"})
    state.set_autoscale(AutoscaleState(routes_gone={"m-a2": 5.0}))
    state.record_orphans([Orphan("b", "v1", "Service", "ml", "s", "u1", "deploy-ml-m")])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".gitignore",  # the state directory ignores itself (security L9)
        "autoscale.json",
        "health.json",
        "orphans.json",
        "routing.json",
    ]
    health = (tmp_path / "health.json").read_text()
    assert health == '{\n  "unhealthySince": {\n    "a": 1.0,\n    "b": 2.0\n  }\n}\n'
    routing = json.loads((tmp_path / "routing.json").read_text())
    assert routing == {"unroutable": {"b": "API unreachable"}, "unready": {"m-a1": "no pods yet"}}
    assert json.loads((tmp_path / "autoscale.json").read_text())["routesGone"] == {"m-a2": 5.0}
    orphans = json.loads((tmp_path / "orphans.json").read_text())["orphans"]
    assert orphans == [
        {
            "cluster": "b",
            "apiVersion": "v1",
            "kind": "Service",
            "namespace": "ml",
            "name": "s",
            "uid": "u1",
            "stack": "deploy-ml-m",
        }
    ]
    assert state.autoscale().routes_gone == {"m-a2": 5.0}


@pytest.mark.parametrize("name", ["health", "routing", "autoscale", "orphans"])
@pytest.mark.parametrize("text", ["{broken", "[1, 2]", '"text"', "null"])
def test_an_unreadable_document_reads_as_empty(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / f"{name}.json").write_text(text)
    state = RuntimeState.at(tmp_path)
    empty = {
        "health": lambda: state.unhealthy_since() == {},
        "routing": lambda: state.routing().exclusions() == (),
        "autoscale": lambda: state.autoscale() == AutoscaleState(),
        "orphans": lambda: state.orphans() == [],
    }
    assert empty[name]()


def test_a_failed_write_leaves_the_old_document_and_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "health.json"
    write_json_atomic(path, {"unhealthySince": {"a": 1.0}})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"unhealthySince": {"a": object()}})  # not JSON
    assert json.loads(path.read_text()) == {"unhealthySince": {"a": 1.0}}
    assert [p.name for p in tmp_path.iterdir()] == ["health.json"]


def test_the_directory_is_made_on_the_first_write(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "a" / ".modelplane")
    assert store.load("health") is None
    store.save("health", {"unhealthySince": {}})
    assert store.path("health").is_file()
    store.delete("health")
    store.delete("health")  # already gone: nothing
    assert not store.path("health").exists()


def test_the_same_state_over_another_store() -> None:
    store = MemoryStore()
    state = RuntimeState(store)
    assert not state.set_routing({})  # nothing to say, nothing recorded
    assert store.docs == {}
    assert state.set_routing({"b": "API unreachable"}, {"m-a1": "no pods yet"})
    assert state.routing().exclusions() == ("b", "replica:m-a1")
    assert state.clear_unready() and state.routing().unready == {}
    a = Orphan("b", "v1", "Service", "ml", "s")
    state.record_orphans([a, a])
    assert state.orphans() == [a]
    state.set_orphans([])
    assert "orphans" not in store.docs
    state.set_unhealthy_since({"b": 3.0})
    assert state.unhealthy_since() == {"b": 3.0}
