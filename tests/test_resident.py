"""`trace watch`'s resident graph (engine/resident.py) is never stale: after any edit it accepts,
its graph, keys and plan are those a fresh full load gives; an edit it cannot account for (a
template, an input, the package set, needs, a new step, a root table, bad input, lost events)
is refused, so the watch runs a full plan. Pure logic: a real load, no Nix (the results of the
first round are faked, their outputs existing files). inotify (engine/inotify.py): a real edit
wakes it, a queue overflow is a loss.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import watch
from engine.cache import Index
from engine.errors import InputError
from engine.graph import load_graph
from engine.hashing import StatCache
from engine.inotify import IN_Q_OVERFLOW, Changes
from engine.plan import plan
from engine.resident import Resident, faithful, sections, splice
from engine.run import RunResult, StepResult
from tests.enginekit import keys_of, layered_steps, make_project, write_inputs
from tests.tiers import repeats

N = 30


def _project(tmp: Path) -> Path:
    graph = make_project(tmp, layered_steps(N))
    write_inputs(tmp)
    return graph


def _first_round(project: Path, graph: Any) -> RunResult:
    """What a first round that built everything returns (its outputs: files that exist)."""
    out = project / "out"
    out.write_text("built\n")
    steps = {
        sid: StepResult(
            id=sid, key=k, status="built", drv=f"/nix/store/{k[:32]}-{sid}.drv", out=str(out)
        )
        for sid, k in keys_of(graph).items()
    }
    return RunResult(graph=str(graph.entry), steps=steps)


@pytest.fixture
def resident(tmp_path: Path) -> tuple[Path, Resident]:
    graph_file = _project(tmp_path / "p")
    graph = load_graph(graph_file, root=tmp_path / "p")
    return graph_file, Resident.make(graph, _first_round(tmp_path / "p", graph))


def _assert_fresh(res: Resident, graph_file: Path) -> None:
    """The resident's graph and keys are exactly what a full load of the files now gives."""
    fresh = load_graph(graph_file, root=graph_file.parent)
    assert res.graph.order == fresh.order
    assert res.graph.steps == fresh.steps  # ids, params, inputs, needs, lines
    assert res.graph.sources == fresh.sources
    assert {p for p, _ in fresh.reads} <= {p for p, _ in res.graph.reads}
    assert res.keys == keys_of(fresh)


def _refused_by_full_load(graph_file: Path) -> bool:
    try:
        load_graph(graph_file, root=graph_file.parent)
    except InputError:
        return True
    return False


def _edit_step(text: str, sid: str, body: str) -> str:
    head = f"[steps.{sid}]\n"
    start = text.index(head) + len(head)
    end = text.find("\n[", start)
    end = len(text) if end < 0 else end + 1
    return text[:start] + body + text[end:]


TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x7f"), max_size=30
)
BODIES = st.builds(
    lambda msg, sleep, fail, pad, comment: (
        f'kind = "text"\nparams = {{ message = {json.dumps(msg, ensure_ascii=False)}, '
        f"sleep = {sleep}, fail = {'true' if fail else 'false'} }}\n"
        + ("# a comment\n" if comment else "")
        + "\n" * pad
    ),
    TEXT,
    st.integers(0, 5),
    st.booleans(),
    st.integers(0, 3),
    st.booleans(),
)


@settings(
    max_examples=repeats(40, 10),  # the fast tier: 10 (tests/tiers.py)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(sid=st.sampled_from([f"s{i}" for i in range(N)]), body=BODIES, data=st.data())
def test_every_accepted_edit_gives_what_a_full_load_gives(
    resident: tuple[Path, Resident], sid: str, body: str, data: st.DataObject
) -> None:
    """The fixture's resident is the same for every example while the file keeps each edit: so
    an update also spans several earlier edits of other steps (lines moved, keys moved)."""
    graph_file, res = resident
    step = res.graph.steps[sid]
    needs = f"needs = {json.dumps(list(step.needs))}\n" if step.needs else ""
    inputs = f'inputs = {{ data = "data/in{int(sid[1:])}.txt" }}\n' if not step.needs else ""
    text = graph_file.read_text()
    graph_file.write_text(_edit_step(text, sid, body + needs + inputs))
    nxt = res.update([str(graph_file)], StatCache())
    if _refused_by_full_load(graph_file):  # e.g. a NUL in a message (Nix strings cannot)
        assert nxt is None
        return
    assert nxt is not None, "an edit of one step's table is taken in place"
    _assert_fresh(nxt, graph_file)
    moved = {s for s in nxt.keys if nxt.keys[s] != res.keys[s]}
    with Index(graph_file.parent / ".trace") as index:
        p, _ = nxt.plan(index)
        assert set(p.dirty) == moved  # the edited step (if its key moved) and what needs it
        fresh, _ = plan(load_graph(graph_file, root=graph_file.parent), index)
        assert {s: sp.key for s, sp in p.steps.items()} == {
            s: sp.key for s, sp in fresh.steps.items()
        }
    # a second edit on top of the first (the resident absorbed nothing: still consistent)
    graph_file.write_text(
        _edit_step(graph_file.read_text(), sid, data.draw(BODIES) + needs + inputs)
    )
    again = nxt.update([str(graph_file)], StatCache())
    assert (again is None) == _refused_by_full_load(graph_file)
    if again is not None:
        _assert_fresh(again, graph_file)


def test_the_plan_says_why_like_the_full_plan(resident: tuple[Path, Resident]) -> None:
    graph_file, res = resident
    text = graph_file.read_text()
    graph_file.write_text(text.replace('message = "step 25 "', 'message = "edited"'))
    nxt = res.update([str(graph_file)], StatCache())
    assert nxt is not None
    with Index(graph_file.parent / ".trace") as index:
        p, _ = nxt.plan(index)
    assert p.dirty == ["s25"]
    assert p.steps["s25"].reasons == ["param 'message' changed"]
    assert p.steps["s25"].prev_key == res.keys["s25"] != p.steps["s25"].key


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


REFUSED = {
    "template": lambda p: ("templates/text.nix.j2", "mkdir $out", "mkdir -p $out"),
    "input file": lambda p: ("data/in3.txt", "", "more\n"),
    "package set": lambda p: ("pkgs/default.nix", "", "\n"),
    "needs": lambda p: ("graph.toml", 'needs = ["s10", "s11"]', 'needs = ["s10"]'),
    "a new step": lambda p: ("graph.toml", "[steps.s0]", '[steps.zz]\nkind = "text"\n[steps.s0]'),
    "the nix table": lambda p: ("graph.toml", 'package_set = "pkgs"', 'package_set = "pkgs" '),
    "a kind's param": lambda p: ("graph.toml", 'default = "hi"', 'default = "ho"'),
    "repeat": lambda p: ("graph.toml", 'message = "step 25 " }', 'message = "x" }\nrepeat = 2'),
    "unknown kind": lambda p: (
        "graph.toml",
        'kind = "text"\nparams = { message = "step 25',
        'kind = "txt"\nparams = { message = "step 25',
    ),
    "wrong type": lambda p: ("graph.toml", 'message = "step 25 "', "message = 25"),
    "unknown param": lambda p: ("graph.toml", 'message = "step 25 "', 'mesage = "x"'),
    "a sub-table": lambda p: ("graph.toml", "[steps.s25]\n", "[steps.s25]\n[steps.s25.params]\n"),
    "bad TOML": lambda p: ("graph.toml", 'message = "step 25 "', 'message = "step 25 '),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_what_the_resident_cannot_account_for_is_a_full_plan(
    resident: tuple[Path, Resident], what: str
) -> None:
    graph_file, res = resident
    rel, old, new = REFUSED[what](graph_file.parent)
    path = graph_file.parent / rel
    if old:
        _edit(path, old, new)
    else:
        path.write_text(path.read_text() + new)
    assert res.update([str(path)], StatCache()) is None, what
    if what in ("unknown kind", "wrong type", "unknown param", "bad TOML"):  # the full load says
        with pytest.raises(InputError):
            load_graph(graph_file, root=graph_file.parent)


def test_lost_events_and_unreadable_reads_are_a_full_plan(
    resident: tuple[Path, Resident],
) -> None:
    graph_file, res = resident
    _edit(graph_file, 'message = "step 25 "', 'message = "x"')
    assert res.update([watch.LOST, str(graph_file)], StatCache()) is None
    assert res.update(["(a read could not be stat'ed or read: full plan)"], StatCache()) is None
    assert res.update([f"{graph_file} (modified during the last run)"], StatCache()) is None
    assert res.update([], StatCache()) is None
    graph_file.chmod(0)
    try:
        if os.geteuid() != 0:
            assert res.update([str(graph_file)], StatCache()) is None
    finally:
        graph_file.chmod(0o644)


def test_a_file_that_changed_between_load_and_resident_is_never_split(tmp_path: Path) -> None:
    """The resident splits a file only if its bytes are the ones the load read (digest)."""
    graph_file = _project(tmp_path / "p")
    graph = load_graph(graph_file, root=tmp_path / "p")
    first = _first_round(tmp_path / "p", graph)
    _edit(graph_file, 'message = "step 25 "', 'message = "raced"')  # after the load
    res = Resident.make(graph, first)
    assert res.update([str(graph_file)], StatCache()) is None


SECTION_TEXT = st.lists(
    st.sampled_from(
        [
            "a = 1\n",
            "[steps.x]\n",
            "[steps.y] # c\n",
            'b = "[q]"\n',
            "\n",
            's = """\n',
            '"""\n',
            "[[arr]]\n",
            "c = [\n",
            "]\n",
        ]
    ),
    max_size=12,
)


@settings(max_examples=repeats(200, 50), deadline=None)  # the fast tier: 50 (tests/tiers.py)
@given(old=SECTION_TEXT, new=SECTION_TEXT, cut=st.integers(0, 12))
def test_splice_splits_as_a_full_split_would(old: list[str], new: list[str], cut: int) -> None:
    before = "".join(old)
    after = "".join(old[:cut] + new + old[cut:])
    secs = faithful(before)
    if secs is None:
        return
    from engine.resident import _Source

    got = splice(_Source(before, tuple(secs)), after)
    whole = sections(after)
    if got is not None:
        assert whole is not None and list(got[0].sections or ()) == whole
        assert got[1] == [i for i, s in enumerate(whole) if s not in secs or secs[i] != s]


def test_faithful_refuses_a_split_that_is_not_the_whole_parse() -> None:
    assert faithful('[steps.a]\nx = """\n[steps.b]\n"""\n') is None  # a header in a string
    assert faithful("[steps.a]\nx = [\n[1],\n]\n") is None  # a line opening with [ in an array
    assert faithful("[a]\nx = 1\n[a]\ny = 2\n") is None  # invalid TOML
    assert faithful('[steps.a]\nkind = "t"\n\n[steps.b]\nkind = "t"\n') is not None


def test_inotify_wakes_on_an_edit_and_says_lost_on_an_overflow(tmp_path: Path) -> None:
    f = tmp_path / "in.txt"
    f.write_text("one\n")
    changes = Changes([(f, ())])
    try:
        assert changes.ok
        assert changes.wait(0.01) == "timeout"
        f.write_text("two\n")
        assert changes.wait(5) == "changed"
    finally:
        changes.close()
    overflow = Changes([(f, ())])
    r, w = os.pipe()
    os.close(overflow._fd)
    overflow._fd = r  # the kernel's record of a queue overflow, as read() gives it
    os.write(w, struct.pack("iIII", -1, IN_Q_OVERFLOW, 0, 0))
    try:
        assert overflow.wait(5) == "lost"
    finally:
        overflow.close()
        os.close(w)


def test_the_c_library_is_looked_up_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """find_library runs `ldconfig -p` in a child process: `trace watch` makes a Changes every
    round, between the edit and the build, and must not pay that each time."""
    import ctypes.util

    from engine import inotify

    found: list[str] = []
    real = ctypes.util.find_library

    def counting(name: str) -> str | None:
        found.append(name)
        return real(name)

    monkeypatch.setattr(ctypes.util, "find_library", counting)
    inotify.libc.cache_clear()
    f = tmp_path / "in.txt"
    f.write_text("one\n")
    for _ in range(3):
        changes = Changes([(f, ())])
        assert changes.ok
        changes.close()
    assert found == ["c"]


class _Lost:
    ok = True

    def __init__(self) -> None:
        self.closed = False

    def watch(self, reads: Any) -> None:
        pass

    def wait(self, timeout: float) -> str:
        return "lost"

    def close(self) -> None:
        self.closed = True


def test_the_loop_runs_a_full_plan_after_lost_events(tmp_path: Path) -> None:
    """A loss wakes the loop and is passed on as a sentence (not a path): a full plan, even when
    the stat signature shows nothing changed."""
    f = tmp_path / "in.txt"
    f.write_text("one\n")
    whys: list[list[str]] = []
    waiters: list[_Lost] = []

    def changes(reads: Any) -> _Lost:
        waiters.append(_Lost())
        return waiters[-1]

    def load_and_run(loaded: Any, why: list[str]) -> Any:
        whys.append(why)
        loaded([(f, ())])
        return type("R", (), {"ok": True, "steps": {}})()

    assert watch.watch(load_and_run, lambda r: None, rounds=2, changes=changes) == 2
    assert whys == [["first run"], [watch.LOST]]
    assert len(waiters) == 1 and waiters[0].closed  # one waiter for the whole watch


def test_a_clean_step_whose_output_is_gone_is_dirty(resident: tuple[Path, Resident]) -> None:
    """Results are remembered by key, but each clean step's output is checked every round."""
    graph_file, res = resident
    _edit(graph_file, 'message = "step 25 "', 'message = "x"')
    nxt = res.update([str(graph_file)], StatCache())
    assert nxt is not None
    (graph_file.parent / "out").unlink()  # every faked output (a GC, a `nix-store --delete`)
    with Index(graph_file.parent / ".trace") as index:
        p, _ = nxt.plan(index)
    assert set(p.dirty) == set(nxt.keys)
    assert p.steps["s0"].reasons == ["output missing from the store"]
