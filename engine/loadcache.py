"""A verified cache of loaded graphs and their step keys, for `trace run` and `trace plan`.

Loading 10,000 steps (TOML parsing, pydantic validation, parameter resolution) and hashing
their keys takes seconds; when nothing the graph was loaded from changed, the previous load's
result is reused instead. An entry is used only when ALL of these hold, else the full load runs
(which is always correct):

- its name matches: engine id (version + digest of the key-shaping modules), the entry file,
  the root, the variant, the context and TRACE_DATA_DIR;
- its HMAC-SHA256 checks out under a per-user secret kept outside the project and the state
  dir (`$XDG_STATE_HOME/trace/load-cache.key`, mode 0600: engine/userkey.py). The state dir
  may sit inside a checkout someone else wrote (`ROOT/.trace` of a fork): an entry written
  without the secret is forged and ignored, and nothing is unpickled before the MAC is checked;
- every pipeline file and template has the sha256 it had when it was loaded (content, not
  mtime: an edit that keeps size and mtime is still seen), at the same real path (a path that
  is now a symlink, or goes through one, is a miss: the full load would resolve it elsewhere);
- every input and the package set, digested again as the full load digests them (through the
  state's stat cache, which itself re-reads a file whose size, mtime, inode or ctime changed),
  gives the recorded digest, at the same real path;
- the files behind `[nix] extra_sandbox_paths` have the identity they had (engine/hostpaths.py).

One exception to the first rule after the MAC: when pipeline files were edited, and the edits
are of step tables only, the entry is brought up to date instead of missing (engine/resident.py,
the same update `trace watch` makes in memory: the entry stores each file's text cut into
sections, checked to parse as the whole file does; only the edited sections are parsed and
validated, only those steps resolved, only their keys and those below them computed; any other
edit, or any doubt, is a miss). The caller stores the updated entry (`Hit.split`).

An entry is one full row under its name and, after edits, one small delta row (`NAME.delta`,
MAC'd the same way) naming the full row it applies to by that row's MAC: the steps, keys, graph
fields and file sections that differ from it. Storing an edit writes the delta only (cost in
proportion to the change, not to the graph: a 1000-step entry is ~300 KB), while the delta stays
small (`DELTA_STEPS`); a larger change, or a store without a full row read by this process
(`_BASES`), writes the full row again and drops the delta. A delta naming another full row (one
written since) is ignored: the full row alone is a genuine older entry, checked as any other.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import pickle
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine import userkey
from engine.errors import InputError
from engine.graphtypes import Graph, InputRef
from engine.hashing import StatCache, digest_bytes, tree_digest
from engine.loader import read_bytes, read_text, resolve
from engine.readonly import read_only_connection

TABLE = "CREATE TABLE IF NOT EXISTS load_cache (name TEXT PRIMARY KEY, mac TEXT, payload BLOB)"
FORMAT = 7  # 2: the graph as dataclasses (engine/graphtypes.py); 3: + unique trees;
# 4: sources first; 5: kinds' default inputs; 6: + the pipeline files' sections
# (engine/resident.py); 7: + the delta row of edits
DELTA = ".delta"  # the delta row's name: the entry's name + this
DELTA_STEPS = 64  # a delta holds at most this many (or a tenth of the graph's) steps, keys and
# sections; a larger change writes the full row again


def key_file() -> Path | None:
    home = userkey.state_home()
    return None if home is None else home / "trace" / "load-cache.key"


def _secret(outside: Iterable[Path], create: bool) -> bytes | None:
    path = key_file()
    return None if path is None else userkey.load(path, outside, create=create)


def name(entry: Path, root: Path, context: Mapping[str, Any] | None, variant: str | None) -> str:
    from engine.plan import engine_id

    ident = [
        FORMAT,
        engine_id(),
        str(resolve(entry)),
        str(resolve(root)),
        variant,
        json.dumps(context or {}, sort_keys=True, default=str),
        os.environ.get("TRACE_DATA_DIR", ""),
    ]
    return digest_bytes(json.dumps(ident).encode())


def _mac(secret: bytes, key: str, payload: bytes) -> str:
    msg = b"trace load cache\0" + key.encode() + b"\0" + payload
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def _trees(graph: Graph) -> Iterator[tuple[InputRef, tuple[str, ...] | None]]:
    """Every input the graph digested, with its exclusions (None: an ordinary input)."""
    if graph.package_set is not None:
        yield graph.package_set, tuple(graph.nix.package_set_exclude)
    for step in graph.steps.values():
        yield from ((ref, None) for ref in step.inputs.values())
        for value in step.params.values():
            refs = value if isinstance(value, list) else [value]
            yield from ((r, None) for r in refs if isinstance(r, InputRef))


def _same_real_path(path: Path) -> bool:
    return os.path.realpath(path) == str(path)


Tree = tuple[Path, tuple[str, ...] | None, str]  # path, exclusions (None: an input), digest


def _unique_trees(graph: Graph) -> list[Tree]:
    """Each (path, exclusions) the graph digested, once: what a lookup digests again."""
    found: dict[tuple[Path, tuple[str, ...] | None], str] = {}
    for ref, exclude in _trees(graph):
        found.setdefault((ref.path, exclude), ref.digest)
    return [(path, exclude, digest) for (path, exclude), digest in found.items()]


def _digest_or_none(path: Path) -> str | None:
    """sha256 of a regular file's bytes (engine/loader.py's rules), None when it cannot be read
    as one (then the cache misses and loading reports why)."""
    try:
        return digest_bytes(read_bytes(path))
    except InputError:
        return None


def _changed_sources(sources: tuple[tuple[Path, str], ...]) -> list[Path] | None:
    """The pipeline files whose bytes are not the ones loaded; None when one is not at its real
    path any more or cannot be read (then: a full load)."""
    changed: list[Path] = []
    for path, digest in sources:
        if not _same_real_path(path):
            return None
        now = _digest_or_none(path)
        if now is None:
            return None
        if now != digest:
            changed.append(path)
    return changed


def _still_valid(graph: Graph, trees: list[Tree], hasher: StatCache) -> bool:
    """Templates, trees and what the sandbox exposes of the host (the pipeline files were
    checked before the graph was unpickled)."""
    from engine import hostpaths

    if hostpaths.identity(graph.nix.extra_sandbox_paths) != graph.nix.sandbox_identity:
        return False
    for kind in graph.kinds.values():
        path = kind.template_path
        if not _same_real_path(path):
            return False
        try:
            text = read_text(path)
        except InputError:
            return False
        if digest_bytes(text.encode()) != kind.template_digest:
            return False
    for path, exclude, recorded in trees:
        if not _same_real_path(path):
            return False
        if exclude is not None and path.is_dir():
            digest = tree_digest(path, hasher, list(exclude))
        else:
            digest = tree_digest(path, hasher)
        if digest != recorded:
            return False
    return True


class Hit:
    """A cached load: the graph and its keys. `split`: set when pipeline files were edited and
    the entry was brought up to date from the edited step tables (engine/resident.py): the
    sections to store with the updated graph (`store(..., split=hit.split)`). `trees`: the
    trees to check (`_unique_trees` of the graph, or more), when the lookup made them (an
    edited entry): what `store` keeps. (A plain class, as `_Base`.)"""

    __slots__ = ("graph", "keys", "split", "trees")

    def __init__(
        self,
        graph: Graph,
        keys: dict[str, str],
        split: Mapping[Path, Any] | None = None,
        trees: list[Tree] | None = None,
    ) -> None:
        self.graph = graph
        self.keys = keys
        self.split = split
        self.trees = trees


class _Base:
    """An entry's full row as this process last read or wrote it (its MAC, graph, keys and
    sections, these unpickled when first needed): what a store of an edit diffs against. (A
    plain class: making a dataclass at import costs every run 2-4M instructions.)"""

    __slots__ = ("graph", "keys", "mac", "split", "steps")

    def __init__(
        self,
        mac: str,
        graph: Graph,
        keys: Mapping[str, str],
        split: bytes | dict[Path, Any],
    ) -> None:
        self.mac = mac
        self.graph = graph
        self.steps = dict(graph.steps)  # copies: what the row holds, whatever the hit becomes
        self.keys = dict(keys)
        self.split = split

    def sections(self) -> dict[Path, Any]:
        if isinstance(self.split, bytes):
            self.split = dict(pickle.loads(self.split))
        return self.split


# (state dir, entry name) -> its full row as this process read or wrote it (one graph per
# process, or a watch's): a store of an edit writes only the delta against it (`_delta`)
_BASES: dict[tuple[str, str], _Base] = {}

Delta = tuple[str, tuple[tuple[Path, str], ...], dict[Path, Any], dict[str, Any], dict[str, str],
              dict[str, Any], list[Tree]]  # fmt: skip
# (the full row's MAC, sources, section patches, steps, keys, other Graph fields, trees)


def lookup(
    state: Path, root: Path, key: str, hasher: StatCache
) -> tuple[Graph, dict[str, str]] | None:
    """The cached (graph, step keys) under `key`, if genuine and still what loading would give."""
    hit = lookup_entry(state, root, key, hasher)
    return None if hit is None else (hit.graph, hit.keys)


def _rows(state: Path, root: Path, key: str) -> tuple[str, bytes, bytes | None] | None:
    """The entry's full row (MAC, payload) and its delta's payload, each if this user's trace
    wrote it (its MAC checks out: nothing else is ever unpickled)."""
    db_path = state / "state.db"
    secret = _secret([root, state], create=False)
    if secret is None or not db_path.is_file():
        return None
    try:
        db = read_only_connection(db_path)
        try:
            rows = db.execute(
                "SELECT name, mac, payload FROM load_cache WHERE name IN (?, ?)", (key, key + DELTA)
            ).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    good = {
        name: (mac, payload)
        for name, mac, payload in rows
        if isinstance(mac, str)
        and isinstance(payload, bytes)
        and hmac.compare_digest(mac, _mac(secret, name, payload))
    }
    if key not in good:
        return None  # not written by this user's trace: never unpickled
    delta = good.get(key + DELTA)
    return good[key][0], good[key][1], None if delta is None else delta[1]


def _patched(split: dict[Path, Any], patches: Mapping[Path, Any]) -> dict[Path, Any]:
    """The sections of each file with a delta's patches applied: (True, all of them) or (False,
    [(index, section)...])."""
    out = dict(split)
    for path, (whole, what) in patches.items():
        if whole:
            out[path] = what
        else:
            secs = list(out[path])
            for i, sec in what:
                secs[i] = sec
            out[path] = tuple(secs)
    return out


def _decode(memo: tuple[str, str], mac: str, payload: bytes, delta: bytes | None) -> Any:
    """(sources, then a function giving (graph, keys, trees, split)): the full row, with the
    delta that names it applied; the sources come first (an edited file is told without
    unpickling the graph)."""
    sources, inner, split = pickle.loads(payload)
    d: Delta | None = None if delta is None else pickle.loads(delta)
    if d is not None and d[0] != mac:
        d = None  # made against another full row: this one alone is the entry
    if not isinstance(inner, bytes):
        raise ValueError("not an entry")

    def graph() -> tuple[Graph, dict[str, str], list[Tree], Any]:
        g, keys, trees = pickle.loads(inner)
        if not isinstance(g, Graph) or g.sources != sources or not isinstance(keys, dict):
            raise ValueError("not an entry")
        base = _BASES[memo] = _Base(mac, g, keys, split)
        if d is None:
            return g, keys, trees, base.sections
        steps = {**g.steps, **d[3]}
        if steps.keys() != g.steps.keys():
            raise ValueError("not a delta of this entry")
        g = replace(g, steps=steps, **d[5])
        return g, {**keys, **d[4]}, d[6], lambda: _patched(base.sections(), d[2])

    return (sources if d is None else d[1]), graph


def lookup_entry(state: Path, root: Path, key: str, hasher: StatCache) -> Hit | None:
    """The cached load under `key`, if genuine and still what loading would give: unchanged,
    or with only step tables of pipeline files edited (those steps validated and resolved
    again, their keys and those below them computed again: engine/resident.py)."""
    rows = _rows(state, root, key)
    if rows is None:
        return None
    try:
        # authenticated above; the pipeline files first
        sources, decode = _decode((str(state), key), *rows)
        changed = _changed_sources(sources)
        if changed is None:
            return None
        graph, keys, trees, split = decode()
        if graph.sources != sources or set(keys) != set(graph.order) or not isinstance(trees, list):
            return None
        hit = Hit(graph, keys) if not changed else _edited(graph, keys, split(), changed, hasher)
        if hit is not None and changed:  # its trees are made once: checked now, stored later
            hit.trees = _more_trees(trees, graph, hit.graph)
        if hit is not None and _still_valid(
            hit.graph, trees if hit.trees is None else hit.trees, hasher
        ):
            return hit
    except Exception:  # unreadable, moved, not UTF-8, a class that changed: load again
        return None
    return None


def _more_trees(trees: list[Tree], old: Graph, new: Graph) -> list[Tree]:
    """`trees` (those of `old`) and what the steps of `new` that are not `old`'s read: the
    trees to check of an edited entry without walking every step (an input no step reads any
    more is still checked: a needless miss at worst; a path with two digests has both checked,
    so one of them misses)."""
    seen = set(trees)
    out = list(trees)
    more = replace(new, package_set=None, steps={
        sid: s for sid, s in new.steps.items() if old.steps.get(sid) is not s
    })  # fmt: skip
    if new.package_set != old.package_set or new.nix != old.nix:
        more = replace(more, package_set=new.package_set)
    for tree in _unique_trees(more):
        if tree not in seen:
            seen.add(tree)
            out.append(tree)
    return out


def _edited(
    graph: Graph,
    keys: dict[str, str],
    split: dict[Path, Any],
    changed: list[Path],
    hasher: StatCache,
) -> Hit | None:
    from engine.resident import Resident

    nxt = Resident.cached(graph, keys, split).update([str(p) for p in changed], hasher)
    return None if nxt is None else Hit(nxt.graph, nxt.keys, nxt.split())


def _patches(old: Mapping[Path, Any], new: Mapping[Path, Any]) -> dict[Path, Any] | None:
    """The sections of each file that differ (see `_patched`); None: not the same files."""
    if old.keys() != new.keys():
        return None
    out: dict[Path, Any] = {}
    for path, secs in new.items():
        was = old[path]
        if secs is was or secs == was:
            continue
        if secs is None or was is None or len(secs) != len(was):
            out[path] = (True, secs)
        else:
            out[path] = (
                False,
                [(i, s) for i, (s, w) in enumerate(zip(secs, was, strict=True)) if s != w],
            )
    return out


def _delta(
    base: _Base, graph: Graph, keys: Mapping[str, str], split: Mapping[Path, Any], trees: list[Tree]
) -> Delta | None:
    """What `graph` and its keys and sections change of the full row `base`, when small."""
    old = base.graph
    if graph.order != old.order or graph.steps.keys() != base.steps.keys():
        return None
    patches = _patches(base.sections(), split)
    if patches is None:
        return None
    steps = {sid: s for sid, s in graph.steps.items() if base.steps[sid] is not s}
    moved = {sid: k for sid, k in keys.items() if base.keys.get(sid) != k}
    fields = {
        f.name: getattr(graph, f.name)
        for f in dataclasses.fields(Graph)
        if f.name != "steps" and getattr(graph, f.name) != getattr(old, f.name)
    }
    size = len(steps) + len(moved)
    size += sum(len(what or ()) for _, what in patches.values())
    if size > max(DELTA_STEPS, len(graph.order) // 10):
        return None
    return (base.mac, graph.sources, patches, steps, moved, fields, trees)


def store(
    db: sqlite3.Connection,
    state: Path,
    key: str,
    graph: Graph,
    keys: Mapping[str, str],
    split: Mapping[Path, Any] | None = None,
    trees: list[Tree] | None = None,
) -> None:
    """Remember a graph that loaded and planned; nothing when no secret can be had. `split`:
    its pipeline files' sections (`Hit.split`), else made here from the files (a full load).
    `trees`: those of this very graph when the caller has them (`Hit.trees`). An edit
    (`split` given) of the full row this process read is stored as a delta when small."""
    from engine.resident import split_of

    secret = _secret([graph.root, state], create=True)
    if secret is None:
        return
    trees = _unique_trees(graph) if trees is None else trees
    base = _BASES.get((str(state), key))
    d = None if split is None or base is None else _delta(base, graph, keys, split, trees)
    db.execute(TABLE)
    if d is not None:
        payload = pickle.dumps(d, protocol=pickle.HIGHEST_PROTOCOL)
        name = key + DELTA
        db.execute(
            "INSERT OR REPLACE INTO load_cache VALUES (?, ?, ?)",
            (name, _mac(secret, name, payload), payload),
        )
        return
    entry = (graph, dict(keys), trees)
    inner = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    sections = dict(split) if split is not None else split_of(graph)
    payload = pickle.dumps(
        (graph.sources, inner, pickle.dumps(sections, protocol=pickle.HIGHEST_PROTOCOL)),
        protocol=pickle.HIGHEST_PROTOCOL,
    )
    mac = _mac(secret, key, payload)
    db.execute("INSERT OR REPLACE INTO load_cache VALUES (?, ?, ?)", (key, mac, payload))
    db.execute("DELETE FROM load_cache WHERE name = ?", (key + DELTA,))
    _BASES[str(state), key] = _Base(mac, graph, keys, sections)
