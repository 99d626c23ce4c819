"""One candidate of a fork: verify, judge, route, decide, bundle, sign."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from engine.errors import InputError
from engine.fork.config import ForkConfig, Source
from engine.fork.entry import pipeline_entry, signing_source, swap_dir, write_if_changed
from engine.fork.once import RunOnce
from engine.fork.report import Outcome

if TYPE_CHECKING:
    from engine.candidate import Candidate
    from engine.evidence.bundle import Assembled
    from engine.evidence.payload import PayloadEntry
    from engine.evidence.replay import RunHost
    from engine.fork.memo import Run
    from engine.fork.nixreads import NixReads
    from engine.model import Graph
    from engine.policy.routing import RouteDecision
    from engine.policy.signing import Decision
    from engine.policy.waivers import WaiverSet
    from engine.run import RunResult
    from engine.verify_result import VerifyResult

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
            from engine.signing.errors import SigningError
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
        from engine.signing.keys import key_hint, load_private_key

        return key_hint(load_private_key(self.key).public_key())

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
        from engine.evidence.statement import PAYLOAD_TYPE

        if self.key is not None:
            from engine.signing.keymode import sign_with_key
            from engine.signing.keys import load_private_key

            return sign_with_key(statement, PAYLOAD_TYPE, load_private_key(self.key)), "key", ""
        token = self._identity()
        if token is None:
            return None, "no", f"unsigned: {self._why_not}"
        from engine.bundle_verify.identity import sign_keyless_locked, signer_lock
        from engine.policy.registry import SIGNING

        signature = sign_keyless_locked(
            statement,
            token=token,
            trust_config=self.trust_config,
            lock_path=signer_lock(self.lock, policy / SIGNING),
            force_identity=self.force_identity,
        )
        return signature, "keyless", ""


def _route(candidate: Candidate, policy: Path) -> RouteDecision:
    from engine.policy.registry import ROUTING
    from engine.policy.routing import route_candidate

    return route_candidate(candidate, policy / ROUTING)


def _decide(
    run: RunResult,
    verify: VerifyResult,
    routing: RouteDecision,
    policy: Path,
    waivers_file: Path | None,
    candidate: Candidate | None,
    root: Path,
    bundle_key: str | None = None,
) -> tuple[Decision, WaiverSet]:
    """As `trace decide`, over the verdict judged from this run's builds (never the result file
    written beside it); waivers apply only when the fork has its own (signed) waivers, checked
    against the merged policy's maintainers.toml (the fork's own, else the shipped one)."""
    from engine.evidence.collect import evidence_sources, gate_records
    from engine.policy.evidence import Evidence
    from engine.policy.registry import SIGNING
    from engine.policy.signed_waiver import waiver_trust
    from engine.policy.signing import decide, load_signing
    from engine.policy.waivers import NO_WAIVERS, load_waivers
    from engine.roles.claims import candidate_review

    signing, catalogue = load_signing(policy / SIGNING)
    waivers = NO_WAIVERS
    if waivers_file is not None:
        trust = waiver_trust(
            signing_policy=policy / SIGNING,
            fork=None,
            candidate=candidate,
            bundle_key=bundle_key,
        )
        waivers = load_waivers(waivers_file, catalogue, trust)
    gates = gate_records(verify, run)
    evidence = Evidence(
        candidate=verify.candidate,
        verify=verify,
        gates=gates,
        sources=evidence_sources(verify, gates, root),
        review=candidate_review(candidate) if candidate is not None else None,
    )
    today = dt.datetime.now(dt.UTC).date()
    return decide(evidence, routing, signing, catalogue, waivers, today), waivers


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
    candidate: Candidate,
    graph: Graph,
    run: RunResult,
    verify: VerifyResult,
    routing: RouteDecision,
    decision: Decision,
    root: Path,
    dirty: bool,
    signing_policy: Path,
    source: Source | None,
    package_set_rel: str,
    host: RunHost,
    ran: tuple[dt.datetime, dt.datetime] | None = None,
    extra: list[PayloadEntry] | None = None,
) -> Assembled:
    from engine.evidence.collect import (
        assemble_evidence,
        candidate_entries,
        gate_entries,
        gate_records,
        outcome_entries,
        verify_entry,
    )
    from engine.evidence.replay import SourcePin

    entries = candidate_entries(candidate) + outcome_entries(run)
    entries.append(verify_entry(verify, root))
    entries += gate_entries(gate_records(verify, run))
    entries += extra or []
    # `fork_pin` counts trace's own untracked state dir as a change; the fork's clean check
    # (which leaves out only the state and bundle dirs) is the one that holds here.
    return assemble_evidence(
        candidate,
        graph,
        run,
        entries,
        routing,
        decision,
        root=root,
        signing_policy=signing_policy,
        builder_id=BUILDER_ID,
        dirty=dirty,
        ran=ran,
        host=host,
        source=None
        if source is None
        else SourcePin(
            store_path=str(source.store_path),
            nar_hash=source.nar_hash,
            system=source.system,
            package_set=package_set_rel,
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
    from engine.cache import Index
    from engine.candidate import load_candidate
    from engine.evidence.waivers import waiver_entries
    from engine.graph import load_graph
    from engine.progress import Progress
    from engine.run import rebuild_steps, run_graph
    from engine.verify.blame import blame_candidate
    from engine.verify.pipeline import project_root, verify_context
    from engine.verify.trusted import from_store
    from engine.verify.verdict import judge

    once = once or RunOnce(cfg)  # a run of one candidate (`trace fork` passes its run's)
    candidate = load_candidate(file)
    cid = candidate.spec.id
    entry = pipeline_entry(cfg, cid)
    root = project_root(cfg.package_set)
    # the gates apply the very policy that decides (its merged copy has the same bytes)
    signing = signing_source(cfg, policy)
    # One lock for the whole candidate: the build, the verify result, the decision and the
    # bundle swap (two `trace fork` runs must not interleave their writes).
    with Index(cfg.state, wait=wait) as index:
        hasher = once.hasher  # one package-set walk per run, not per candidate
        graph = load_graph(
            entry,
            root=root,
            context=verify_context(candidate, cfg.package_set, signing),
            hasher=hasher,
            variant=cid,
        )
        hasher.flush(index.writable())
        chosen = rebuild_steps(graph, *rebuild)  # `--rebuild`: engine/run.py
        began = dt.datetime.now(dt.UTC)
        watcher = nix_reads_watcher(cfg) if memo is not None else None
        with Progress(enabled=progress) as reporter:
            try:
                run = run_graph(graph, index, jobs=jobs, reporter=reporter, rebuild=chosen)
            except InputError as exc:
                raise blame_candidate(exc, candidate) from None
        run = from_store(graph, run, index, recheck=True)  # the index is never evidence
        for line in run.rebuild_findings():
            print(f"trace: {cid}: {line}", file=sys.stderr)
        nix_read = watcher.collect() if watcher is not None else None
        ran = (began, dt.datetime.now(dt.UTC))
        verify = judge(candidate, graph, run)
        result = cfg.state / "verify" / f"{cid}.json"
        write_if_changed(result, (verify.model_dump_json(indent=2, by_alias=True) + "\n").encode())
        routing = _route(candidate, policy)
        waivers = fork_waivers(cfg.policy, policy)
        # every gate record (the standard gates and the fork's own steps) comes from the run
        decision, valid = _decide(
            run, verify, routing, policy, waivers, candidate, root, signer.key_hint()
        )
        write_if_changed(
            cfg.state / "decisions" / f"{cid}.json",
            (decision.model_dump_json(indent=2, by_alias=True) + "\n").encode(),
        )
        assembled = _assemble(
            candidate,
            graph,
            run,
            verify,
            routing,
            decision,
            root,
            dirty,
            signing,
            cfg.source,
            cfg.package_set.relative_to(cfg.root).as_posix(),
            once.host,
            ran=ran,
            extra=waiver_entries(valid, cid, decision.maintainers),
        )
        signature: str | None = None
        how: Literal["key", "keyless", "no"] = "no"
        note = ""
        if decision.decision == "allow":
            signature, how, note = signer.sign(assembled.statement_bytes, policy)
        bundle = replace_bundle(cfg.bundles / cid, assembled, signature)
    notes = [note] if note else []
    if run.rebuilt_differently:  # `--rebuild`: shown in the table, and the run exits 1
        notes.append("rebuilt differently: " + ", ".join(run.rebuilt_differently))
    # a deny for the environment (a tool missing from the sandbox): said in the table, with
    # its record, so nobody changes the patch for it (engine/policy/signing.py environmental)
    notes += [
        f"{r.code}: {d}"
        for r in decision.reasons
        for d in r.details
        if d.startswith("environmental:")
    ]
    note = "; ".join(notes)
    statuses = [r.status for r in run.steps.values()]
    outcome = Outcome(
        candidate=cid,
        file=str(file),
        package=candidate.spec.package,
        verified=verify.passed,
        verify_reasons=verify.reasons,
        verify_details=[
            f"{c.reason}: {c.detail}" if c.detail else c.reason
            for c in verify.claims
            if not c.holds
        ],
        route=routing.state,
        decision=decision.decision,
        decision_reasons=[r.code for r in decision.reasons],
        bundle=str(bundle),
        signed=how,
        note=note,
        built=sum(s == "built" for s in statuses),
        reused=sum(s == "reused" for s in statuses),
        substituted=sum(s == "substituted" for s in statuses),
        cached=sum(s == "cached" for s in statuses),
        steps=sorted(run.steps),
        accuracy=_accuracy(candidate),
        rebuilt_differently=run.rebuilt_differently,
    )
    if memo is not None:  # this run passed the trust boundary: a no-op may reuse it
        reads = [*graph.reads, *_candidate_reads(candidate)]
        outs = [str(r.out) for r in run.steps.values() if r.out]
        sandbox = (graph.nix.extra_sandbox_paths, graph.nix.sandbox_identity)
        carry = carry_over(cfg, graph, run, reads, nix_read)
        memo.remember(file, outcome, reads, outs, sandbox, carry)
    return outcome


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
