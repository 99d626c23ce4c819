"""engine/loadcache.py: a loaded graph is reused only when genuine and still what loading gives.

No Nix needed: `trace plan --no-eval` loads, plans and renders, and the cache API is called
directly. Every way an entry could be stale or forged is a miss, and a forged entry is never
unpickled."""

from __future__ import annotations

import json
import os
import pickle
import shutil
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


def project(tmp_path: Path, n: int = 20) -> tuple[Path, Path]:
    graph = make_project(tmp_path / "p", layered_steps(n, width=5))
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


def _rows(state: Path) -> dict[str, tuple[str, bytes]]:
    db = sqlite3.connect(state / "state.db")
    try:
        rows = db.execute("SELECT name, mac, payload FROM load_cache").fetchall()
    finally:
        db.close()
    return {str(n): (str(m), bytes(p)) for n, m, p in rows}


def test_each_edit_of_one_step_is_seen_and_stored_as_a_small_delta(tmp_path: Path) -> None:
    """One step's table edited the ways real tools edit a file (size and mtime kept too:
    tests/test_engine_stale.py's edits), one step after another: every lookup and every plan
    answers with the edited graph and a full load's keys, while the entry's full row stays as
    the full load wrote it and each edit writes only the small delta row."""
    from engine.graph import load_graph
    from tests.test_engine_stale import EDITS

    graph, state = project(tmp_path, 100)  # the last layer: s95-s99
    plan_json(graph, state)
    key = loadcache.name(graph, graph.parent, None, None)
    full = _rows(state)[key]
    messages = {sid: f"step {sid} " for sid in (97, 92, 95)}
    for n, (how, sid) in enumerate(zip(sorted(EDITS) * 3, [97, 92, 97, 95] * 4, strict=False)):
        if n % 2:
            loadcache._BASES.clear()  # as a fresh process: the full row as read by its lookup
        new = f"e{n:02d} {sid} "  # as long as the old message: the file keeps its size
        text = graph.read_text().replace(f'"{messages[sid]}"', f'"{new}"')
        EDITS[how](graph, text)
        messages[sid] = new
        hit = lookup(graph, state)
        assert hit is not None, how
        assert hit[0].steps[f"s{sid}"].params["message"] == new, how
        assert hit[0].steps == load_graph(graph, root=graph.parent).steps
        assert hit[1] == _fresh_keys(graph)
        planned = {s["id"]: s["key"] for s in plan_json(graph, state)["steps"]}
        assert planned == _fresh_keys(graph)
        rows = _rows(state)
        assert rows[key] == full  # the full row is not written again
        assert len(rows[key + loadcache.DELTA][1]) < len(full[1]) // 8
        again = lookup(graph, state)
        assert again is not None and again[0].steps[f"s{sid}"].params["message"] == new


def test_a_delta_made_against_another_full_row_is_not_applied(tmp_path: Path) -> None:
    """A delta names the full row it was made against: after a full load wrote another full
    row (here: a template changed, so every key moved), the old delta (genuine, put back) is
    not applied; otherwise its keys, made with the old template, would be answered."""
    graph, state = project(tmp_path)
    plan_json(graph, state)
    key = loadcache.name(graph, graph.parent, None, None)
    seven = graph.read_text().replace('"step 7 "', '"seven"')
    graph.write_text(seven)
    plan_json(graph, state)
    delta = _rows(state)[key + loadcache.DELTA]
    graph.write_text(seven.replace('"seven"', '"eight"'))
    template = graph.parent / "templates" / "text.nix.j2"
    template.write_text(template.read_text() + "\n")
    plan_json(graph, state)  # a full load: a new full row, no delta
    assert key + loadcache.DELTA not in _rows(state)
    graph.write_text(seven)  # the bytes the old delta was made from
    db = sqlite3.connect(state / "state.db")
    with db:
        db.execute("INSERT INTO load_cache VALUES (?, ?, ?)", (key + loadcache.DELTA, *delta))
    db.close()
    for fresh_process in (False, True):
        if fresh_process:
            loadcache._BASES.clear()
        hit = lookup(graph, state)
        assert hit is not None and hit[0].steps["s7"].params["message"] == "seven"
        assert hit[1] == _fresh_keys(graph)


def test_an_input_a_stored_edit_added_is_still_checked(tmp_path: Path) -> None:
    """The trees of an edited entry are the old ones and the edited steps' (not every step's
    again): an input the edit added is among them, so changing it later is a miss."""
    graph, state = project(tmp_path)
    plan_json(graph, state)
    extra = graph.parent / "data" / "extra.txt"
    extra.write_text("extra\n")
    text = graph.read_text()
    assert '[steps.s17]\nkind = "text"\n' in text
    graph.write_text(
        text.replace('[steps.s17]\nkind = "text"\n', '[steps.s17]\nkind = "text"\ninputs = { '
                     'more = "data/extra.txt" }\n')
    )  # fmt: skip
    plan_json(graph, state)
    key = loadcache.name(graph, graph.parent, None, None)
    assert key + loadcache.DELTA in _rows(state)  # stored as a delta
    hit = lookup(graph, state)
    assert hit is not None and "more" in hit[0].steps["s17"].inputs
    extra.write_text("other\n")
    assert lookup(graph, state) is None


def test_a_plan_with_known_keys_makes_components_only_when_used(tmp_path: Path) -> None:
    """With the load cache's keys, the plan makes no clean step's components (a run records
    only those of keys that moved; issue 30: 1000 of them were ~16M instructions of a one-change
    run); a dirty step's are made for its reasons, and read, every step's are the full plan's."""
    from engine.cache import CachedResult, Index, gcroot_folder
    from engine.graph import load_graph
    from engine.plan import graph_id, plan

    graph, state = project(tmp_path)
    g = load_graph(graph, root=graph.parent)
    keys, out = _fresh_keys(graph), tmp_path / "out"
    out.write_text("")
    built, last = g.order[:-1], g.order[-1]  # the last step never built: dirty
    with Index(state) as index:
        full, _ = plan(g, index)
        results = [CachedResult(key=keys[s], step_id=s, drv="/x.drv", out=str(out)) for s in built]
        index.record(
            results, {s: (keys[s], s, full.steps[s].components) for s in built}, graph_id(g)
        )
        p, _ = plan(g, index, keys)
    shutil.rmtree(gcroot_folder(state))  # its roots name no real store path
    assert p.dirty == [last] and p.steps[last].reasons == ["never built"]
    assert [s for s, sp in p.steps.items() if sp._components is not None] == [last]
    assert {s: sp.key for s, sp in p.steps.items()} == keys
    assert {s: sp.components for s, sp in p.steps.items()} == {
        s: sp.components for s, sp in full.steps.items()
    }
