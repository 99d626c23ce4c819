"""One candidate of a fork: verify, judge, route, decide, bundle, sign."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from engine.fork.config import ForkConfig
from engine.fork.entry import pipeline_entry, signing_source, swap_dir, write_if_changed
from engine.fork.once import RunOnce
from engine.fork.outcome_table import Outcome
from engine.pipeline.build import build_fresh, judge_built
from engine.pipeline.bundle import assemble, payload_entries
from engine.pipeline.decide import decide
from engine.pipeline.route import route
from engine.pipeline.sign import key_hint_of, sign_keyless, sign_with_key
from engine.pipeline.values import Decided, Judged
from engine.verify.fork_graph import project_root

if TYPE_CHECKING:
    from pydantic import BaseModel

    from engine.cache import Index
    from engine.candidate import Candidate
    from engine.evidence.bundle import Assembled
    from engine.evidence.replay import RunHost
    from engine.fork.memo import Run
    from engine.fork.nixreads import NixReads
    from engine.graphtypes import Graph
    from engine.run import RunResult

BUILDER_ID = "urn:trace:builder:fork"  # docs/evidence.md


class Signer:
    """Signs allowed bundles with a key, or keyless with a token found once (lazily)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.key: Path | None = args.key
        self.explicit: str | None = args.identity_token
        self.trust_config: Path | None = args.trust_config
        self.enabled = not args.no_sign
        self.lock: Path | None = getattr(args, "signer_lock", None)
        self.force_identity: bool = bool(getattr(args, "force_identity", False))
        self._token: str | None = None
        self._why_not: str | None = None

    def _identity(self) -> str | None:
        if self._token is None and self._why_not is None:
            from engine.errors import SigningError
            from engine.signing.oidc import identity_token

            try:
                self._token = identity_token(self.explicit)
            except SigningError as exc:
                self._why_not = exc.render()
        return self._token

    def key_hint(self) -> str | None:
        """The hint of the key that signs bundles (key mode): it may not sign a waiver."""
        if not self.enabled or self.key is None:
            return None
        return key_hint_of(self.key)

    def can_sign_keyless(self) -> bool:
        """Whether an allowed candidate left unsigned would now be signed keyless (looks the
        token up: only asked for such a candidate, once per run)."""
        return self.enabled and self.key is None and self._identity() is not None

    def sign(
        self, statement: bytes, policy: Path
    ) -> tuple[str | None, Literal["key", "keyless", "no"], str]:
        """Sign under `policy` (the merged policy folder): keyless signing checks the token
        against the identity lock first (`--signer-lock`, else `signing-identity.json` there),
        the same path as `trace bundle`; a token outside it is refused (SigningError)."""
        if not self.enabled:
            return None, "no", "signing disabled (--no-sign)"
        if self.key is not None:
            return sign_with_key(statement, self.key), "key", ""
        token = self._identity()
        if token is None:
            return None, "no", f"unsigned: {self._why_not}"
        from engine.policy.registry import SIGNING

        signature = sign_keyless(
            statement,
            token,
            trust_config=self.trust_config,
            lock=self.lock,
            signing_policy=policy / SIGNING,
            force_identity=self.force_identity,
        )
        return signature, "keyless", ""


def _decide(
    judged: Judged,
    policy: Path,
    waivers_file: Path | None,
    root: Path,
    transcripts: Path,
    bundle_key: str | None = None,
) -> Decided:
    """As `trace decide`, over the verdict judged from this run's builds (never the result file
    written beside it); waivers apply only when the fork has its own (signed) waivers, checked
    against the merged policy's maintainers.toml (the fork's own, else the shipped one)."""
    from engine.evidence.collect import evidence_sources, gate_records
    from engine.evidence.decisions import waiver_set
    from engine.policy.registry import ROUTING, SIGNING
    from engine.policy.signed_waiver import waiver_trust
    from engine.policy.signing_decision import load_signing
    from engine.policy.waivers import NO_WAIVERS

    routing = route(judged.candidate, policy / ROUTING)
    load_signing(policy / SIGNING)  # a broken signing policy is refused before the waivers
    waivers = NO_WAIVERS
    if waivers_file is not None:
        trust = waiver_trust(
            signing_policy=policy / SIGNING,
            fork=None,
            candidate=judged.candidate,
            bundle_key=bundle_key,
        )
        waivers = waiver_set(waivers_file, policy / SIGNING, trust)
    # every gate record (the standard gates and the fork's own steps) comes from the run
    gates = gate_records(judged.verify, judged.run)
    sources = evidence_sources(judged.verify, gates, root)
    today = dt.datetime.now(dt.UTC).date()
    return decide(
        judged,
        gates,
        sources,
        routing,
        policy=policy / SIGNING,
        waivers=waivers,
        today=today,
        transcripts=transcripts,
    )


def fork_waivers(own: Path | None, merged: Path) -> Path | None:
    """The fork's waivers: its own CONFIG/policy/waivers/ directory of signed files, else its
    waivers.toml (merged copy; every entry unsigned, so ignored with a warning), else none."""
    from engine.policy.registry import WAIVERS

    if own is None:
        return None
    if (own / "waivers").is_dir():
        return own / "waivers"
    return merged / WAIVERS if (own / WAIVERS).is_file() else None


def _assemble(
    cfg: ForkConfig,
    judged: Judged,
    decided: Decided,
    *,
    signing_policy: Path,
    dirty: bool,
    host: RunHost,
) -> Assembled:
    """The candidate's bundle (payload, decisions, replay record with the fork's source pin)."""
    from engine.evidence.collect import gate_records
    from engine.evidence.replay import SourcePin
    from engine.evidence.waivers import waiver_entries

    cid = judged.candidate.spec.id
    root = project_root(cfg.package_set)
    extra = waiver_entries(decided.waivers, cid, decided.decision.maintainers)
    entries = payload_entries(judged, gate_records(judged.verify, judged.run), root, extra)
    source = cfg.source
    # `fork_pin` counts trace's own untracked state dir as a change; the fork's clean check
    # (which leaves out only the state and bundle dirs) is the one that holds here.
    return assemble(
        judged,
        entries,
        decided,
        root=root,
        signing_policy=signing_policy,
        builder_id=BUILDER_ID,
        dirty=dirty,
        host=host,
        source=None
        if source is None
        else SourcePin(
            store_path=str(source.store_path),
            nar_hash=source.nar_hash,
            system=source.system,
            package_set=cfg.package_set.relative_to(cfg.root).as_posix(),
        ),
    )


def replace_bundle(dest: Path, assembled: Assembled, signature: str | None) -> Path:
    """Write the bundle beside `dest`, then swap it in: a reader never sees half a bundle."""
    from engine.evidence.bundle import write_bundle

    dest.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new.", dir=dest.parent))
    fresh.rmdir()
    write_bundle(fresh, assembled, signature)
    swap_dir(fresh, dest)
    return dest


@dataclass(frozen=True)
class Build:
    """How `trace fork` builds: its `-j`, progress display, `--rebuild` (step names, every
    step) and whether to watch what Nix reads of the package set (a memo records it)."""

    jobs: int | None
    progress: bool
    rebuild: tuple[Sequence[str], bool] = ((), False)
    watch: bool = False


def _judged(
    cfg: ForkConfig, candidate: Candidate, index: Index, once: RunOnce, signing: Path, build: Build
) -> tuple[Judged, dict[str, str] | None]:
    """Load the fork's verify graph for the candidate (the gates applying `signing`), build it
    fresh (`--rebuild`'s steps rebuilt with --check), check every step the index answered
    against the store, judge; also what Nix read of the package set (`build.watch`)."""
    from engine.graph import load_graph
    from engine.rebuilds import rebuild_steps
    from engine.verify.fork_graph import verify_context

    hasher = once.hasher  # one package-set walk per run, not per candidate
    graph = load_graph(
        pipeline_entry(cfg, candidate.spec.id),
        root=project_root(cfg.package_set),
        context=verify_context(candidate, cfg.package_set, signing),
        hasher=hasher,
        variant=candidate.spec.id,
    )
    hasher.flush(index.writable())
    chosen = rebuild_steps(graph, *build.rebuild)  # `--rebuild`: engine/rebuilds.py
    watcher = nix_reads_watcher(cfg) if build.watch else None
    built = build_fresh(
        candidate,
        graph,
        index,
        jobs=build.jobs,
        progress=build.progress,
        recheck=True,  # the index is never evidence
        rebuild=chosen,
    )
    for line in built.run.rebuild_findings():
        print(f"trace: {candidate.spec.id}: {line}", file=sys.stderr)
    nix_read = watcher.collect() if watcher is not None else None
    return judge_built(built), nix_read


def _record(path: Path, model: BaseModel) -> None:
    write_if_changed(path, (model.model_dump_json(indent=2, by_alias=True) + "\n").encode())


def verify_candidate(
    cfg: ForkConfig,
    file: Path,
    policy: Path,
    signer: Signer,
    once: RunOnce | None = None,
    *,
    dirty: bool,
    jobs: int | None,
    progress: bool,
    wait: float,
    memo: Run | None = None,
    rebuild: tuple[Sequence[str], bool] = ((), False),
) -> Outcome:
    """Verify, judge, route, decide, bundle and sign one candidate of the fork (the pipeline's
    stages, engine/pipeline/), under one lock of the state directory for all of it (two `trace
    fork` runs must not interleave their writes)."""
    from engine.cache import Index
    from engine.candidate import load_candidate

    once = once or RunOnce(cfg)  # a run of one candidate (`trace fork` passes its run's)
    candidate = load_candidate(file)
    cid = candidate.spec.id
    # the gates apply the very policy that decides (its merged copy has the same bytes)
    signing = signing_source(cfg, policy)
    with Index(cfg.state, wait=wait) as index:
        result, nix_read = _judged(
            cfg, candidate, index, once, signing, Build(jobs, progress, rebuild, memo is not None)
        )
        _record(cfg.state / "verify" / f"{cid}.json", result.verify)
        decided = _decide(
            result,
            policy,
            fork_waivers(cfg.policy, policy),
            project_root(cfg.package_set),
            cfg.state / "transcripts",
            signer.key_hint(),
        )
        _record(cfg.state / "decisions" / f"{cid}.json", decided.decision)
        assembled = _assemble(
            cfg, result, decided, signing_policy=signing, dirty=dirty, host=once.host
        )
        signature: str | None = None
        how: Literal["key", "keyless", "no"] = "no"
        note = ""
        if decided.decision.decision == "allow":
            signature, how, note = signer.sign(assembled.statement_bytes, policy)
        bundle = replace_bundle(cfg.bundles / cid, assembled, signature)
    outcome = _outcome(file, result, decided, bundle, how, _notes(note, result, decided))
    if memo is not None:  # this run passed the trust boundary: a no-op may reuse it
        graph, run = result.graph, result.run
        reads = [*graph.reads, *_candidate_reads(candidate)]
        outs = [str(r.out) for r in run.steps.values() if r.out]
        sandbox = (graph.nix.extra_sandbox_paths, graph.nix.sandbox_identity)
        carry = carry_over(cfg, graph, run, reads, nix_read)
        memo.remember(file, outcome, reads, outs, sandbox, carry)
    return outcome


def _notes(note: str, judged: Judged, decided: Decided) -> str:
    """The table's note: the signer's, `--rebuild`'s findings and environmental denies."""
    notes = [note] if note else []
    run = judged.run
    if run.rebuilt_differently:  # `--rebuild`: shown in the table, and the run exits 1
        notes.append("rebuilt differently: " + ", ".join(run.rebuilt_differently))
    # a deny for the environment (a tool missing from the sandbox): said in the table, with
    # its record, so nobody changes the patch for it (engine/policy/signing_decision.py,
    # environmental)
    notes += [
        f"{r.code}: {d}"
        for r in decided.decision.reasons
        for d in r.details
        if d.startswith("environmental:")
    ]
    return "; ".join(notes)


def _outcome(
    file: Path,
    judged: Judged,
    decided: Decided,
    bundle: Path,
    how: Literal["key", "keyless", "no"],
    note: str,
) -> Outcome:
    """What `trace fork` reports of one candidate (and its memo remembers)."""
    verify, decision = judged.verify, decided.decision
    statuses = [r.status for r in judged.run.steps.values()]
    return Outcome(
        candidate=judged.candidate.spec.id,
        file=str(file),
        package=judged.candidate.spec.package,
        verified=verify.passed,
        verify_reasons=verify.reasons,
        verify_details=[
            f"{c.reason}: {c.detail}" if c.detail else c.reason
            for c in verify.claims
            if not c.holds
        ],
        route=decided.routing.state,
        decision=decision.decision,
        decision_reasons=[r.code for r in decision.reasons],
        bundle=str(bundle),
        signed=how,
        note=note,
        built=sum(s == "built" for s in statuses),
        reused=sum(s == "reused" for s in statuses),
        substituted=sum(s == "substituted" for s in statuses),
        cached=sum(s == "cached" for s in statuses),
        steps=sorted(judged.run.steps),
        accuracy=_accuracy(judged.candidate),
        rebuilt_differently=judged.run.rebuilt_differently,
    )


def nix_reads_watcher(cfg: ForkConfig) -> NixReads | None:
    """Watch what Nix reads of the package set during a full run (engine/fork/nixreads.py)."""
    from engine.fork.memo import package_root
    from engine.fork.nixreads import NixReads

    root = package_root(cfg)
    return None if root is None else NixReads(root)


def carry_over(
    cfg: ForkConfig,
    graph: Graph,
    run: RunResult,
    reads: list[tuple[Path, tuple[str, ...]]],
    nix_read: dict[str, str] | None,
) -> tuple[list[tuple[Path, tuple[str, ...]]], dict[str, str]] | None:
    """What lets a later commit keep this verdict: every read but the package set, and what Nix
    read of it; None when that is not the whole story: nothing recorded, or a derivation of the
    run depends on the whole source store path (a later commit changes it whatever Nix read)."""
    if nix_read is None or cfg.source is None or graph.package_set is None:
        return None
    drvs = sorted({r.drv for r in run.steps.values() if r.drv})
    if not drvs or str(cfg.source.store_path) in _closure(drvs):
        return None
    own = graph.package_set.path
    return [r for r in reads if Path(r[0]) != own], nix_read


def _closure(drvs: list[str]) -> set[str]:
    """Every store path the derivations need to build (one nix-store; unknown: everything)."""
    import subprocess

    try:
        proc = subprocess.run(
            ["nix-store", "--query", "--requisites", *drvs],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {"?"}
    return set(proc.stdout.split()) if proc.returncode == 0 else {"?"}


def _candidate_reads(candidate: Candidate) -> list[tuple[Path, tuple[str, ...]]]:
    """The candidate's folder and every file it names outside it (its advisory, patches,
    reproducer, review, accuracy.json: routing, decisions and the bundle read them)."""
    found: list[tuple[Path, tuple[str, ...]]] = [(candidate.dir, ())]

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str) and 0 < len(value) < 4096 and "\n" not in value:
            path = candidate.file(value)
            if path.is_file() and not path.is_relative_to(candidate.dir):
                found.append((path, ()))

    walk(candidate.spec.model_dump(mode="json"))
    return found


def _accuracy(candidate: Candidate) -> str:
    """The drafted candidate's comparison with the upstream fix, when `trace draft` made one."""
    import json

    from engine.roles.compare import recorded_summary

    path = candidate.dir / "accuracy.json"
    if not path.is_file():
        return ""
    try:
        doc = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "unreadable accuracy.json"
    patch = "".join(candidate.patch_texts())
    return "\n".join(recorded_summary(doc, patch))
