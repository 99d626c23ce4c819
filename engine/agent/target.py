"""`trace draft ADVISORY-OR-CANDIDATE` as a library: find the fork, write the skeleton from an
advisory (or take the given one), pick the agent file, resolve the upstream fix, run the draft
(engine.agent.draft.run_draft). The command line is engine/cli/draft.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.agent.draft_record import DraftRecord


@dataclass(frozen=True)
class DraftRequest:
    """What `trace draft` was asked, beyond the target (each None: the default it documents)."""

    fork: Path | None = None
    agent: Path | None = None
    package: str | None = None
    source: Path | None = None
    state_dir: Path | None = None
    refresh: bool = False
    upstream_mirror: Path | None = None
    fetch_upstream: bool = False
    signing_policy: Path | None = None
    jobs: int | None = None


def _skeleton(target: Path, req: DraftRequest, fork: Path) -> tuple[Path, Path | None]:
    """The skeleton to draft from, and its folder when this run creates it (removed again
    when the draft ends with an error: nothing half-written)."""
    from engine.advisory import load_advisory
    from engine.agent.skeleton import skeleton_folder, write_skeleton
    from engine.errors import UsageError

    target = target.resolve()
    if target.suffix == ".toml":
        return target, None
    adv = load_advisory(target)
    names = adv.packages
    package = req.package or (names[0] if len(names) == 1 else None)
    if package is None:
        raise UsageError(
            f"advisory {adv.id} names {len(names)} packages ({', '.join(names) or 'none'})",
            hint="pass --package NAME (the attribute in the fork)",
        )
    folder = skeleton_folder(fork, adv, package)
    created = None if folder.exists() else folder
    return write_skeleton(fork, adv, target.read_bytes(), package, adv.upstream_fix), created


def draft_target(target: Path, req: DraftRequest) -> tuple[DraftRecord, Path]:
    """Draft a fix for an OSV advisory JSON or a candidate.toml skeleton: the record and the
    skeleton it was drafted in. A skeleton this call wrote from the advisory is removed again when
    the draft ends with an error or an interrupt (nothing half-written)."""
    import shutil

    from engine.errors import TraceError, UsageError
    from engine.verify.fork_graph import find_fork

    fork = (req.fork or find_fork(target) or Path.cwd()).resolve()
    if not (fork / "trace.toml").is_file() and not (fork / "default.nix").is_file():
        raise UsageError(f"{fork} is not a fork (no trace.toml or default.nix)",
                         hint="pass --fork")  # fmt: skip
    skeleton, created = _skeleton(target, req, fork)
    try:
        return _draft(req, fork, skeleton), skeleton
    except (TraceError, KeyboardInterrupt):
        if created is not None:  # the skeleton this run wrote from the advisory goes too
            shutil.rmtree(created, ignore_errors=True)
        raise


def _draft(req: DraftRequest, fork: Path, skeleton: Path) -> DraftRecord:
    from engine.agent.draft import run_draft
    from engine.agent.options import DraftOptions
    from engine.candidate import load_candidate
    from engine.errors import UsageError
    from engine.paths import data_dir
    from engine.roles.agentfile import load_agent

    agent_file = req.agent or (
        fork / "trace" / "agent.toml"
        if (fork / "trace" / "agent.toml").is_file()
        else data_dir() / "graphs" / "agent.toml"
    )
    agent = load_agent(agent_file)
    spec = load_candidate(skeleton, for_routing=True).spec
    if spec.patches and not (skeleton.parent / "draft.json").is_file():
        raise UsageError(
            f"candidate '{spec.id}' already has patches and was not drafted by trace draft: "
            "drafting would overwrite them",
            hint="draft from its advisory JSON or a skeleton (trace scout writes them) instead",
        )
    state = (req.state_dir or fork / ".trace").resolve()
    source = (req.source or fork / "pkgs" / spec.package / "src").resolve()
    upstream = None
    if spec.advisory.upstream_fix:
        from engine.roles.resolver import resolve

        upstream = resolve(
            spec.advisory.upstream_fix, req.upstream_mirror, source, fetch=req.fetch_upstream
        ).model_dump()
    opts = DraftOptions(
        fork=fork,
        state=state,
        source=source,
        refresh=req.refresh,
        jobs=req.jobs,
        signing_policy=req.signing_policy,
        upstream=upstream,
    )
    return run_draft(skeleton, agent, opts)
