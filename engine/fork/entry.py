"""The files `trace fork` writes before building: the entry pipeline and the merged policy."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from engine.errors import InputError
from engine.files import write_atomic
from engine.fork.config import ForkConfig

STANDARD_GRAPH = "trace:graphs/verify.toml"
FORK_FILE = "trace.toml"  # a fork-wide pipeline entry, as `trace verify` reads it


def write_if_changed(path: Path, data: bytes) -> None:
    """Atomic write that leaves a file already holding `data` untouched."""
    write_atomic(path, data, if_changed=True)


def swap_dir(fresh: Path, dest: Path) -> None:
    """Put the finished directory `fresh` at `dest` (replacing what was there) by renames: a
    reader never sees half of it."""
    import shutil

    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
        os.replace(dest, old / dest.name)
    os.replace(fresh, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _declared_excludes(files: list[Path]) -> list[str]:
    from engine.loader import read_document

    found: list[str] = []
    for f in files:
        try:
            nix = read_document(f, "pipeline file").data.get("nix", {})
        except InputError:
            continue  # the graph loader reports it, with its location
        if not isinstance(nix, dict):
            continue
        found += [str(x) for x in nix.get("package_set_exclude", []) if isinstance(x, str)]
    return found


def source_package_set(cfg: ForkConfig) -> Path:
    """GENERATED/package-set.nix (`ForkConfig.generated`): the package set from the flake's own
    source store path, imported purely (no user config or overlays; the system named). Its
    digest is the package set's digest: the store path is content-addressed, so git-ignored
    files, `result` links and anything else Nix did not copy cannot change a key."""
    src = cfg.source
    assert src is not None
    rel = cfg.package_set.relative_to(cfg.root).as_posix()
    target = str(src.store_path) if rel == "." else f"{src.store_path}/{rel}"
    text = (
        "# Written by `trace fork`: the fork's package set from its flake source as Nix copied\n"
        "# it (git-tracked files), imported purely: no user config, overlays or current system.\n"
        "{ ... }:\n"
        f"import {json.dumps(target)} {{\n"
        "  config = { };\n"
        "  overlays = [ ];\n"
        f"  system = {json.dumps(src.system)};\n"
        "}\n"
    )
    path = cfg.generated / "package-set.nix"
    write_if_changed(path, text.encode())
    return path


def pipeline_entry(cfg: ForkConfig, candidate_id: str) -> Path:
    """The entry pipeline: the fork's trace.toml (or the standard one) plus its own steps.

    One entry file per candidate: the cache index remembers a graph's last keys by its entry
    file (dirty reasons, `trace gc`), and each candidate's graph is a graph of its own.

    The fork's trace folder is left out of the package set's digest (the package set never
    reads it; each candidate's files enter its own steps' keys), so editing one candidate
    rebuilds only that candidate's steps.
    """
    own = cfg.package_set / FORK_FILE
    includes = [str(own) if own.is_file() else STANDARD_GRAPH]
    if cfg.steps is not None:
        includes.append(str(cfg.steps))
    exclude = _declared_excludes([p for p in (own, cfg.steps) if p is not None and p.is_file()])
    # trace's own folders inside the package set: its config, and --state-dir/--out when given
    # there (they change on every run; `.trace` itself is always left out)
    for own_dir in (cfg.config, cfg.state, cfg.bundles):
        if own_dir.is_relative_to(cfg.package_set) and own_dir != cfg.package_set:
            rel = own_dir.relative_to(cfg.package_set).as_posix()
            if rel.split("/")[0] != ".trace" and rel not in exclude:
                exclude.append(rel)
    package_set = ""
    if cfg.source is not None:
        package_set = f"package_set = {json.dumps(str(source_package_set(cfg)))}\n"
    text = (
        "# Written by `trace fork`: the verify pipeline with this fork's own steps.\n"
        "version = 1\n"
        f"include = {json.dumps(includes)}\n"
        "\n[nix]\n"
        f"{package_set}"
        f"package_set_exclude = {json.dumps(exclude)}\n"
    )
    entry = cfg.generated / candidate_id / "pipeline.toml"
    write_if_changed(entry, text.encode())
    return entry


def signing_source(cfg: ForkConfig, merged: Path) -> Path:
    """The signing policy file the fork applies: its own CONFIG/policy/signing.toml (or that of
    --policy), else the shipped one. The gates apply it and the replay record names it (relative
    to the fork, or `trace:`); decisions are made with its copy in the merged policy dir, which
    must have the same bytes."""
    from engine.policy.registry import SIGNING, policy_dir

    own = cfg.policy / SIGNING if cfg.policy is not None else None
    source = own if own is not None and own.is_file() else policy_dir() / SIGNING
    if source.read_bytes() != (merged / SIGNING).read_bytes():
        raise InputError(
            f"the merged signing policy {merged / SIGNING} differs from its source {source}",
            file=source,
            hint="another process changed it during this run: run `trace fork` again",
        )
    return source


REASONS = "reasons.toml"
SHIPPED_MARK = "# ---- the shipped catalogue's codes, merged in by `trace fork` ----\n"


def _codes(path: Path) -> tuple[str, list[str]]:
    from engine.loader import read_document

    doc = read_document(path, "reason catalogue")
    text, data = doc.text, doc.data
    return text, [str(r.get("code")) for r in data.get("reasons", []) if isinstance(r, dict)]


def merged_reasons(own: Path, shipped: Path) -> bytes:
    """The fork's reason catalogue: its own file holds its `[policy]` and only its NEW codes,
    which extend the shipped ones (a published code never changes meaning, so redefining a
    shipped code is an error). A file that already holds every shipped code (a full copy, as
    forks kept before) is used as it is."""
    own_text, own_codes = _codes(own)
    ship_text, ship_codes = _codes(shipped)
    if set(ship_codes) <= set(own_codes):
        return own_text.encode()
    clash = sorted(set(own_codes) & set(ship_codes))
    if clash:
        raise InputError(
            f"the fork's reason catalogue redefines shipped code(s): {', '.join(clash)}",
            file=own,
            key="reasons",
            hint="list only the fork's NEW codes there (the shipped ones are merged in); a "
            "published code never changes meaning: give a changed rule a new code",
        )
    start = ship_text.find("[[reasons]]")
    body = ship_text[start:] if start >= 0 else ""
    return (own_text.rstrip("\n") + "\n\n" + SHIPPED_MARK + body).encode()


def merged_policy(cfg: ForkConfig) -> Path:
    """STATE/policy: the shipped policy files, each replaced by the fork's file of that name;
    the fork's reasons.toml extends the shipped catalogue instead (`merged_reasons`)."""
    from engine.policy.registry import policy_dir

    shipped: dict[str, Path] = {p.name: p for p in policy_dir().iterdir() if p.is_file()}
    files = dict(shipped)
    if cfg.policy is not None:
        files.update({p.name: p for p in cfg.policy.iterdir() if p.is_file()})
    dest = cfg.state / "policy"
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.iterdir():
        if stale.name not in files and stale.is_file():
            stale.unlink()
    for name, src in sorted(files.items()):
        if name == REASONS and name in shipped and src != shipped[name]:
            data = merged_reasons(src, shipped[name])
        else:
            data = src.read_bytes()
        write_if_changed(dest / name, data)
    return dest
