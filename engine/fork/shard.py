"""`trace fork --shard I/N`: which candidates one CI job verifies, and the directory it leaves.

The rule (docs/scale.md): a candidate belongs to shard `int(sha256(NAME)[:16], 16) mod N + 1`,
where NAME is the candidate's name in the fork (its folder under CONFIG/candidates, or the stem
of a `<name>.toml` there). It depends on nothing but the name and N: the order candidates are
found in, and candidates added or removed, never move another candidate to another shard (a
changed N does). A shard may be empty.

The shard directory (`--shard-dir`, default STATE/shards/I-of-N) holds everything `trace fork
--merge` needs, with no path outside it:

    shard.json     the manifest: I, N, the rule, the fork's commit and package set, the digest of
                   the merged policy, the engine id, every candidate name of the run and this
                   shard's names
    report.json    this shard's rows (trace.fork/v1; each bundle path relative: bundles/<id>)
    bundles/<id>   a copy of each candidate's evidence bundle
    policy/        the merged policy directory the bundles were decided and checked with

It is written beside its place and swapped in, so a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.errors import UsageError
from engine.fork.config import ForkConfig, candidate_name
from engine.fork.entry import swap_dir
from engine.fork.outcome_table import ForkReport

MANIFEST = "shard.json"
REPORT = "report.json"
BUNDLES = "bundles"
POLICY = "policy"
MAX_SHARDS = 1000


class Manifest(BaseModel):
    """shard.json: what one shard ran, and what every shard of one run must agree on."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["trace.fork-shard/v1"] = Field(default="trace.fork-shard/v1", alias="schema")
    shard: int = Field(ge=1)
    of: int = Field(ge=1, le=MAX_SHARDS)
    rule: Literal["sha256(name)[:16] mod N + 1"] = "sha256(name)[:16] mod N + 1"
    fork: str
    commit: str | None
    dirty: bool
    package_set: str  # relative to the fork root
    source: str | None  # the flake source store path (`nix run .#verify`), else None
    source_nar_hash: str | None
    policy_digest: str
    engine: str
    candidates: list[str]  # every candidate name of the run, in discovery order
    names: list[str]  # this shard's names


# what every shard of one run must agree on, with the words an error uses for it
AGREE: dict[str, str] = {
    "of": "shard count N",
    "rule": "sharding rule",
    "commit": "fork commit (package-set revision)",
    "dirty": "dirty flag of the work tree",
    "package_set": "package set",
    "source": "flake source (package-set revision)",
    "source_nar_hash": "flake source narHash (package-set revision)",
    "policy_digest": "policy digest",
    "engine": "engine version",
    "candidates": "candidate list",
}


def parse_spec(spec: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N."""
    parts = spec.split("/")
    try:
        i, n = (int(p) for p in parts) if len(parts) == 2 else (0, 0)
    except ValueError:
        i, n = 0, 0
    if not 1 <= i <= n <= MAX_SHARDS:
        raise UsageError(
            f"--shard {spec!r} is not I/N with 1 <= I <= N <= {MAX_SHARDS}",
            hint="e.g. --shard 2/4: the second of four shards (a CI matrix index + 1, its size)",
        )
    return i, n


def shard_of(name: str, n: int) -> int:
    """The shard (1..n) of a candidate name: a hash of the name alone (see the module doc)."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:16], 16) % n + 1


def select(files: list[Path], i: int, n: int) -> list[Path]:
    return [f for f in files if shard_of(candidate_name(f), n) == i]


def policy_digest(policy: Path) -> str:
    """sha256 over the merged policy directory: every file's name and the sha256 of its bytes."""
    lines = "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n"
        for p in sorted(policy.iterdir())
        if p.is_file()
    )
    return hashlib.sha256(lines.encode()).hexdigest()


def write_shard(
    dest: Path,
    cfg: ForkConfig,
    report: ForkReport,
    policy: Path,
    *,
    shard: tuple[int, int],
    every: list[Path],
    mine: list[Path],
) -> Path:
    """Write the shard directory (module doc) for a finished shard run; returns it."""
    from engine.plan import engine_id

    dest = dest.resolve()
    if dest == cfg.state or cfg.state.is_relative_to(dest) or cfg.bundles.is_relative_to(dest):
        raise UsageError(
            f"--shard-dir {dest} would replace trace's state or bundles",
            hint="give the shard its own directory (e.g. shard-out/, then upload it)",
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new.", dir=dest.parent))
    try:
        rows = []
        for row in report.candidates:
            rel = None
            if row.bundle is not None:
                rel = f"{BUNDLES}/{Path(row.bundle).name}"
                shutil.copytree(row.bundle, tmp / rel, symlinks=True)
            rows.append(replace(row, bundle=rel))
        shutil.copytree(policy, tmp / POLICY)
        (tmp / REPORT).write_text(replace(report, candidates=rows).to_json(), encoding="utf-8")
        src = cfg.source
        manifest = Manifest(
            shard=shard[0],
            of=shard[1],
            fork=str(cfg.root),
            commit=report.commit,
            dirty=report.dirty,
            package_set=cfg.package_set.relative_to(cfg.root).as_posix(),
            source=str(src.store_path) if src else None,
            source_nar_hash=src.nar_hash if src else None,
            policy_digest=policy_digest(policy),
            engine=engine_id(),
            candidates=[candidate_name(f) for f in every],
            names=[candidate_name(f) for f in mine],
        )
        (tmp / MANIFEST).write_text(
            manifest.model_dump_json(indent=2, by_alias=True) + "\n", encoding="utf-8"
        )
        swap_dir(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
