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
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import userkey
from engine.errors import InputError
from engine.graphtypes import Graph, InputRef
from engine.hashing import StatCache, digest_bytes, tree_digest
from engine.loader import read_bytes, read_text, resolve
from engine.readonly import read_only_connection

TABLE = "CREATE TABLE IF NOT EXISTS load_cache (name TEXT PRIMARY KEY, mac TEXT, payload BLOB)"
FORMAT = 6  # 2: the graph as dataclasses (engine/graphtypes.py); 3: + unique trees;
# 4: sources first; 5: kinds' default inputs; 6: + the pipeline files' sections (engine/resident.py)


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


@dataclass(frozen=True)
class Hit:
    """A cached load: the graph and its keys. `split`: set when pipeline files were edited and
    the entry was brought up to date from the edited step tables (engine/resident.py): the
    sections to store with the updated graph (`store(..., split=hit.split)`)."""

    graph: Graph
    keys: dict[str, str]
    split: Mapping[Path, Any] | None = None
    # `_unique_trees(graph)`, when the lookup made it (an edited entry): what `store` keeps
    trees: list[Tree] | None = None


def lookup(
    state: Path, root: Path, key: str, hasher: StatCache
) -> tuple[Graph, dict[str, str]] | None:
    """The cached (graph, step keys) under `key`, if genuine and still what loading would give."""
    hit = lookup_entry(state, root, key, hasher)
    return None if hit is None else (hit.graph, hit.keys)


def _row(state: Path, root: Path, key: str) -> bytes | None:
    """The entry's payload, if this user's trace wrote it (its MAC checks out)."""
    db_path = state / "state.db"
    secret = _secret([root, state], create=False)
    if secret is None or not db_path.is_file():
        return None
    try:
        db = read_only_connection(db_path)
        try:
            row = db.execute(
                "SELECT mac, payload FROM load_cache WHERE name = ?", (key,)
            ).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    if row is None or not isinstance(row[0], str) or not isinstance(row[1], bytes):
        return None
    if not hmac.compare_digest(row[0], _mac(secret, key, row[1])):
        return None  # not written by this user's trace: never unpickled
    return row[1]


def lookup_entry(state: Path, root: Path, key: str, hasher: StatCache) -> Hit | None:
    """The cached load under `key`, if genuine and still what loading would give: unchanged,
    or with only step tables of pipeline files edited (those steps validated and resolved
    again, their keys and those below them computed again: engine/resident.py)."""
    payload = _row(state, root, key)
    if payload is None:
        return None
    try:
        # authenticated above; the pipeline files first: an edited one is told without
        # unpickling the graph
        sources, inner, split = pickle.loads(payload)
        changed = _changed_sources(sources)
        if not isinstance(inner, bytes) or changed is None:
            return None
        graph, keys, trees = pickle.loads(inner)
        if (
            not isinstance(graph, Graph)
            or graph.sources != sources
            or not isinstance(keys, dict)
            or set(keys) != set(graph.order)
            or not isinstance(trees, list)
        ):
            return None
        hit = Hit(graph, keys) if not changed else _edited(graph, keys, split, changed, hasher)
        if hit is not None and changed:  # its trees are made once: checked now, stored later
            hit = replace(hit, trees=_unique_trees(hit.graph))
        if hit is not None and _still_valid(
            hit.graph, trees if hit.trees is None else hit.trees, hasher
        ):
            return hit
    except Exception:  # unreadable, moved, not UTF-8, a class that changed: load again
        return None
    return None


def _edited(
    graph: Graph, keys: dict[str, str], split: bytes, changed: list[Path], hasher: StatCache
) -> Hit | None:
    from engine.resident import Resident

    sections = pickle.loads(split)
    nxt = Resident.cached(graph, keys, sections).update([str(p) for p in changed], hasher)
    return None if nxt is None else Hit(nxt.graph, nxt.keys, nxt.split())


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
    `trees`: `_unique_trees(graph)` when the caller has it (`Hit.trees` of this very graph)."""
    from engine.resident import split_of

    secret = _secret([graph.root, state], create=True)
    if secret is None:
        return
    entry = (graph, dict(keys), _unique_trees(graph) if trees is None else trees)
    inner = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    sections = pickle.dumps(
        dict(split) if split is not None else split_of(graph), protocol=pickle.HIGHEST_PROTOCOL
    )
    payload = pickle.dumps((graph.sources, inner, sections), protocol=pickle.HIGHEST_PROTOCOL)
    db.execute(TABLE)
    db.execute(
        "INSERT OR REPLACE INTO load_cache VALUES (?, ?, ?)",
        (key, _mac(secret, key, payload), payload),
    )
