"""The replay record: everything needed to rerun a verification and compare its outcomes.

It pins the package set (git commit and tree of the fork, and the engine's digest of it), the
candidate file, the graph and template files (sha256), the engine version, `nix --version`, the
Nix system, and for model-made patches the model id, prompt digest and parameters. `steps`
records each step's content key, derivation and the sha256 of its canonical outcome, so
`trace verify-bundle --replay` can rebuild and compare step by step.

File pins are relative to the project root (for `trace verify`: the fork), or `trace:<path>` for
trace's own shipped graphs and templates (wherever trace is installed), as graphs name them.
The graph is loaded for a replay exactly as `trace verify` loads it: with
`engine.verify.fork_graph.verify_context(candidate, root, signing_policy)` (`context = "verify"`),
where `signing_policy` is the file the record pins (its thresholds are the gate steps' `policy`
parameters, so they are part of the gate steps' keys): `trace:policy/signing.toml` for the
shipped file, a path relative to the project root for a fork's own. A signing policy outside
both cannot be pinned: a bundle made with one is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from engine.errors import InputError
from engine.graphtypes import Graph
from engine.hashing import digest_json
from engine.paths import PREFIX, data_dir, resolve_ref
from engine.run import RunResult

SCHEMA: Final = "trace.replay/v1"
_DEADLINE = 30.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FilePin(_Model):
    path: str = Field(description="relative to the project root")
    sha256: str


class ForkPin(_Model):
    path: str = Field(description="package set directory, relative to the project root")
    commit: str | None = Field(description="git commit of HEAD (None outside git)")
    tree: str | None = Field(description="git tree of HEAD")
    dirty: bool = Field(description="the work tree differs from HEAD")
    digest: str | None = Field(
        default=None, description="the engine's digest of the package set (in every step key)"
    )


class TranscriptPin(_Model):
    """One model step of `trace draft` (engine/evidence/agent_claims.py): what, of whom."""

    step: str
    role: str
    model: str
    family: str
    parameters: dict[str, Any]
    prompt_sha256: str
    key: str = Field(description="the transcript's content key (engine/models/transcript.py)")
    path: str = Field(description="the bundled transcript; its sha256 is the statement's")


class ModelPin(_Model):
    id: str
    prompt_sha256: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict)
    transcripts: list[TranscriptPin] | None = Field(
        default=None, description="model steps of a drafted candidate (None: not drafted)"
    )


class StepPin(_Model):
    key: str
    drv: str | None = None
    drv_sha256: str | None = Field(
        default=None, description="sha256 of the .drv file's bytes (what the statement's uri names)"
    )
    outcome_sha256: str | None = Field(
        default=None, description="sha256 of the RFC 8785 form of the step's outcome JSON"
    )
    needs: list[str] = Field(
        default_factory=list,
        description="ids of the steps this one needs (the graph's edges, for the report's picture)",
    )


class SourcePin(_Model):
    """The package set as Nix copied it: a fork flake's own source (git-tracked files only,
    content-addressed), imported purely (`import SRC { config = {}; overlays = []; system; }`)."""

    store_path: str
    nar_hash: str | None = Field(default=None, description="the flake's narHash (SRI)")
    system: str = Field(description="the system the package set was imported for")
    package_set: str = Field(default=".", description="relative to the store path")


class ReplayRecord(_Model):
    schema_: Literal["trace.replay/v1"] = Field(default=SCHEMA, alias="schema")
    context: Literal["verify"] = Field(
        default="verify",
        description="how the graph is loaded: verify_context(candidate, fork=project root)",
    )
    engine_version: str
    nix_version: str
    system: str
    candidate: FilePin
    graph: FilePin = Field(description="the entry pipeline file")
    graph_files: list[FilePin] = Field(default_factory=list, description="included files")
    templates: list[FilePin] = Field(default_factory=list)
    package_set: ForkPin | None = None
    source: SourcePin | None = Field(
        default=None,
        description="`trace fork` from a flake (`nix run .#verify`): the package set's source "
        "store path, narHash and system (None: the work tree was imported)",
    )
    signing_policy: FilePin | None = Field(
        default=None,
        description="the signing policy the graph was loaded with (whose thresholds the gates "
        "applied); None only in records made before it was pinned (the default by location)",
    )
    model: ModelPin | None = None
    steps: dict[str, StepPin] = Field(default_factory=dict)


def outcome_digest(outcome: Any) -> str | None:
    """The digest a replay record pins for an outcome: of the outcome as bundled, redacted (so
    pins, `payload/outcomes/` and a replay's rebuilt outcomes are compared as the same bytes)."""
    from engine.evidence.redact import redact_value

    return None if outcome is None else digest_json(redact_value(outcome)[0])


def pin_name(path: Path, root: Path) -> str:
    """`path` relative to the project root, else `trace:<rel>` inside trace's data dir."""
    target = path.resolve()
    for base, prefix in ((root.resolve(), ""), (data_dir(), PREFIX)):
        if target.is_relative_to(base):
            return prefix + target.relative_to(base).as_posix()
    raise InputError(
        f"{path} is outside the project root {root} and trace's data dir {data_dir()}",
        file=path,
        hint="keep candidates, graphs and templates inside the project",
    )


def pinned_path(name: str, root: Path) -> Path:
    """The file a pin names, in this checkout (the inverse of `pin_name`)."""
    return resolve_ref(name, root)


def file_pin(path: Path, root: Path) -> FilePin:
    return FilePin(path=pin_name(path, root), sha256=hashlib.sha256(path.read_bytes()).hexdigest())


def signing_policy_pin(path: Path, root: Path) -> FilePin:
    """The pin of the signing policy a graph is loaded with; refused (InputError) when a replay
    could not find it: outside the project root and trace's data dir, or unreadable."""
    try:
        name = pin_name(path, root)
    except InputError:
        raise InputError(
            f"the signing policy {path} is outside the fork {root} and trace's data dir "
            f"{data_dir()}: a bundle's replay record could not name it",
            file=path,
            hint="copy the policy (and the catalogue it names) into the fork, e.g. "
            "FORK/trace/policy/, and name that copy with --signing-policy",
        ) from None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the signing policy: {exc.strerror}", file=path) from None
    return FilePin(path=name, sha256=hashlib.sha256(raw).hexdigest())


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=_DEADLINE, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


class RunHost(NamedTuple):
    """What a caller that makes many records in one run (`trace fork`) asked once for all of
    them: the Nix version and system, and the package set's git commit and tree (its caller's
    clean check gives `dirty`)."""

    nix_version: str
    system: str
    commit: str | None
    tree: str | None


def fork_pin(
    package_set: Path, root: Path, digest: str | None = None, host: RunHost | None = None
) -> ForkPin:
    """git commit + tree of the package set's repository (None when it is not a git checkout);
    from `host` when given (no git process; `dirty` is then the caller's to set)."""
    d = package_set if package_set.is_dir() else package_set.parent
    try:
        rel = package_set.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        rel = str(package_set.resolve())
    if host is not None:
        dirty = host.commit is None
        return ForkPin(path=rel, commit=host.commit, tree=host.tree, dirty=dirty, digest=digest)
    commit = _run(["git", "-C", str(d), "rev-parse", "HEAD"])
    tree = _run(["git", "-C", str(d), "rev-parse", "HEAD^{tree}"]) if commit else None
    status = _run(["git", "-C", str(d), "status", "--porcelain", "--", "."]) if commit else None
    return ForkPin(
        path=rel, commit=commit, tree=tree, dirty=bool(status) or commit is None, digest=digest
    )


def nix_version() -> str:
    return _run(["nix", "--version"]) or "unknown"


def nix_system() -> str:
    out = _run(["nix-instantiate", "--eval", "--json", "-E", "builtins.currentSystem"])
    return out.strip('"') if out else "unknown"


def _file_sha256(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def build_replay_record(
    graph: Graph,
    run: RunResult,
    *,
    candidate_file: Path,
    root: Path,
    model: ModelPin | None = None,
    signing_policy: Path | None = None,
    host: RunHost | None = None,
) -> ReplayRecord:
    """Pin everything a replay needs, from a loaded graph and the run that built it.

    `signing_policy`: the file the graph's context was made with (`verify_context`); every
    verify graph names it (None only for graphs loaded without the gates' context); `host`: the
    Nix version, system and git state asked once for a whole run (else asked here)."""
    from engine import __version__

    templates = sorted({k.template_path.resolve() for k in graph.kinds.values()})
    return ReplayRecord(
        engine_version=__version__,
        nix_version=host.nix_version if host else nix_version(),
        system=host.system if host else nix_system(),
        candidate=file_pin(candidate_file, root),
        graph=file_pin(graph.entry, root),
        graph_files=[file_pin(f, root) for f in sorted({f.resolve() for f in graph.files})],
        templates=[file_pin(t, root) for t in templates],
        package_set=fork_pin(graph.package_set.path, root, graph.package_set.digest, host)
        if graph.package_set
        else None,
        signing_policy=signing_policy_pin(signing_policy, root) if signing_policy else None,
        model=model,
        steps={
            sid: StepPin(
                key=r.key,
                drv=r.drv,
                drv_sha256=_file_sha256(r.drv),
                outcome_sha256=outcome_digest(r.outcome),
                needs=sorted(graph.steps[sid].needs) if sid in graph.steps else [],
            )
            for sid, r in sorted(run.steps.items())
        },
    )
