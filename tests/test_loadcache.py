"""engine/loadcache.py: a loaded graph is reused only when genuine and still what loading gives.

No Nix needed: `trace plan --no-eval` loads, plans and renders, and the cache API is called
directly. Every way an entry could be stale or forged is a miss, and a forged entry is never
unpickled."""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from engine import loadcache
from engine.hashing import StatCache
from tests.enginekit import cli, layered_steps, make_project, write_inputs


@pytest.fixture(autouse=True)
def _own_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


def project(tmp_path: Path) -> tuple[Path, Path]:
    graph = make_project(tmp_path / "p", layered_steps(20, width=5))
    write_inputs(graph.parent, width=5)
    return graph, tmp_path / "state"


def plan_json(graph: Path, state: Path) -> dict[str, Any]:
    rc, out, err = cli(
        "plan", str(graph), "--root", str(graph.parent), "--state-dir", str(state), "--no-eval",
        "--json",
    )  # fmt: skip
    assert rc == 0, err
    return dict(json.loads(out))


def lookup(graph: Path, state: Path) -> Any:
    key = loadcache.name(graph, graph.parent, None, None)
    return loadcache.lookup(state, graph.parent, key, StatCache.read_only(state / "state.db"))


def test_an_unchanged_graph_is_not_loaded_again_and_plans_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, state = project(tmp_path)
    first = plan_json(graph, state)
    assert lookup(graph, state) is not None

    def no_load(*a: object, **k: object) -> None:
        raise AssertionError("loaded again although nothing changed")

    monkeypatch.setattr("engine.graph.load_graph", no_load)
    assert plan_json(graph, state) == first


def test_an_edit_keeping_size_and_mtime_is_seen(tmp_path: Path) -> None:
    """Content, not mtime: the edited step is what the entry answers with now (brought up to
    date from its table: engine/resident.py), never the old step."""
    graph, state = project(tmp_path)
    before = {s["id"]: s["key"] for s in plan_json(graph, state)["steps"]}
    st = graph.stat()
    text = graph.read_text()
    assert 'message = "step 7 "' in text
    graph.write_text(text.replace('message = "step 7 "', 'message = "step 8 "'))
    os.utime(graph, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert graph.stat().st_size == st.st_size and graph.stat().st_mtime_ns == st.st_mtime_ns
    hit = lookup(graph, state)
    assert hit is not None and hit[0].steps["s7"].params["message"] == "step 8 "
    assert hit[1] == _fresh_keys(graph)
    after = {s["id"]: s["key"] for s in plan_json(graph, state)["steps"]}
    assert after["s7"] != before["s7"]
    assert after["s0"] == before["s0"]


def _fresh_keys(graph: Path) -> dict[str, str]:
    from engine.graph import load_graph
    from engine.hashing import key_digest
    from engine.plan import components

    g = load_graph(graph, root=graph.parent)
    keys: dict[str, str] = {}
    for sid in g.order:
        keys[sid] = key_digest(components(g, g.steps[sid], keys))
    return keys


def test_an_edited_step_table_is_brought_up_to_date_and_stored(tmp_path: Path) -> None:
    """`trace plan` (as `trace run`) of a graph whose step tables were edited: the entry's
    graph and keys are a full load's (the edited steps validated and resolved again, the keys
    below them moved), and the updated entry is what the next run finds; any other edit is a
    miss."""
    graph, state = project(tmp_path)
    plan_json(graph, state)
    text = graph.read_text()
    graph.write_text(
        text.replace('message = "step 7 "', 'message = "seven", sleep = 1').replace(
            "[steps.s12]\n", "[steps.s12]\n# a comment\n\n"
        )
    )
    key = loadcache.name(graph, graph.parent, None, None)
    hasher = StatCache.read_only(state / "state.db")
    hit = loadcache.lookup_entry(state, graph.parent, key, hasher)
    assert hit is not None and hit.split is not None
    assert hit.keys == _fresh_keys(graph)
    from engine.graph import load_graph

    assert hit.graph.steps == load_graph(graph, root=graph.parent).steps  # lines too
    plan_json(graph, state)
    again = loadcache.lookup_entry(state, graph.parent, key, hasher)
    assert again is not None and again.split is None  # stored: unchanged since
    graph.write_text(graph.read_text().replace('default = "hi"', 'default = "ho"'))
    assert lookup(graph, state) is None  # a kind's table: a full load


def test_an_entry_stored_from_an_edit_still_sees_its_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edited entry's trees are made once, by the lookup (`Hit.trees`), and stored with the
    updated graph (`trace plan` and `trace run` store alike): they are that graph's
    (`_unique_trees`), so an input changed after the stored edit is still a miss."""
    graph, state = project(tmp_path)
    plan_json(graph, state)
    graph.write_text(graph.read_text().replace('message = "step 7 "', 'message = "seven"'))
    key = loadcache.name(graph, graph.parent, None, None)
    hit = loadcache.lookup_entry(state, graph.parent, key, StatCache.read_only(state / "state.db"))
    assert hit is not None and hit.split is not None
    assert hit.trees and hit.trees == loadcache._unique_trees(hit.graph)
    stored: list[Any] = []
    real_store = loadcache.store

    def spy(*args: Any) -> None:
        stored.append(args)
        real_store(*args)

    monkeypatch.setattr(loadcache, "store", spy)
    plan_json(graph, state)
    assert len(stored) == 1 and stored[0][-1] == hit.trees  # the lookup's, not made again
    again = lookup(graph, state)
    assert again is not None and again[0].steps["s7"].params["message"] == "seven"
    (graph.parent / "data" / "in0.txt").write_text("other input\n")
    assert lookup(graph, state) is None


def test_a_changed_input_or_template_is_a_miss(tmp_path: Path) -> None:
    graph, state = project(tmp_path)
    plan_json(graph, state)
    data = graph.parent / "data" / "in0.txt"
    data.write_text("other input\n")
    assert lookup(graph, state) is None
    plan_json(graph, state)
    assert lookup(graph, state) is not None
    template = graph.parent / "templates" / "text.nix.j2"
    template.write_text(template.read_text() + "\n")
    assert lookup(graph, state) is None


def test_an_input_reached_through_a_new_symlink_is_a_miss(tmp_path: Path) -> None:
    # same bytes at the same spelled path, but the full load resolves the link: the input is
    # another path (another store name, so another derivation)
    graph, state = project(tmp_path)
    before = {s["id"]: s["key"] for s in plan_json(graph, state)["steps"]}
    data = graph.parent / "data"
    data.rename(graph.parent / "moved")
    data.symlink_to(graph.parent / "moved")
    assert lookup(graph, state) is None
    moved = {s["id"]: s["key"] for s in plan_json(graph, state)["steps"]}
    assert moved["s0"] != before["s0"]  # the input is moved/in0.txt now
    assert lookup(graph, state) is not None  # and that load is what is cached now


def _row(state: Path) -> tuple[str, str, bytes]:
    db = sqlite3.connect(state / "state.db")
    try:
        row = db.execute("SELECT name, mac, payload FROM load_cache").fetchone()
    finally:
        db.close()
    return str(row[0]), str(row[1]), bytes(row[2])


def _put(state: Path, name: str, mac: str, payload: bytes) -> None:
    db = sqlite3.connect(state / "state.db")
    with db:
        db.execute(
            "UPDATE load_cache SET mac = ?, payload = ? WHERE name = ?", (mac, payload, name)
        )
    db.close()


class _Bomb:
    """Unpickling this touches a file: proof that a forged payload was deserialised."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def test_a_forged_entry_is_detected_and_never_unpickled(tmp_path: Path) -> None:
    graph, state = project(tmp_path)
    plan_json(graph, state)
    name, mac, payload = _row(state)
    marker = tmp_path / "unpickled"
    bomb = pickle.dumps(_Bomb(marker))
    # a payload of someone without this user's secret: keeping the old MAC or guessing one
    for forged_mac in (mac, "0" * 64, loadcache._mac(b"x" * 32, name, bomb)):
        _put(state, name, forged_mac, bomb)
        assert lookup(graph, state) is None
    assert not marker.exists()
    # a genuine payload moved under another name (another graph) does not verify either
    _put(state, name, mac, payload)
    assert lookup(graph, state) is not None
    assert lookup(graph.parent / "other.toml", state) is None
    # one flipped byte
    _put(state, name, mac, payload[:-9] + bytes([payload[-9] ^ 1]) + payload[-8:])
    assert lookup(graph, state) is None
    assert not marker.exists()


def test_a_secret_others_could_read_or_write_is_not_used(tmp_path: Path) -> None:
    graph, state = project(tmp_path)
    plan_json(graph, state)
    assert lookup(graph, state) is not None
    key = loadcache.key_file()
    assert key is not None
    key.chmod(0o644)
    assert lookup(graph, state) is None


def test_a_secret_inside_the_project_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # whoever wrote the project (a fork) could have written the key too
    graph, state = project(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(graph.parent / ".keys"))
    plan_json(graph, state)
    key = loadcache.key_file()
    assert key is not None and not key.exists()
    assert lookup(graph, state) is None
