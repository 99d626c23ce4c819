"""`trace fork`: verify every fix candidate of a nixpkgs fork (what `nix run .#verify` runs).

At the fork's root (a git work tree) it reads `trace/` (name set by `--config`):

    trace/candidates/<name>/candidate.toml   (or trace/candidates/<name>.toml)
    trace/steps.toml                         optional: the fork's own kinds and steps, included
                                             into the standard pipeline (e.g. an extra gate)
    trace/policy/                            optional: files that replace the shipped policy
                                             files of the same name (routing.toml, signing.toml,
                                             reasons.toml, waivers.toml, signing-identity.json, …)

For each candidate: run the verify pipeline (package set `import <root>/<package-set> {}`),
judge it, route it, decide whether it may be signed, write one evidence bundle, and sign it when
the policy allows and an identity is available (`--key`, `--identity-token`, or CI's ambient
OIDC token). Then one summary table. The tree must be clean (the replay record pins its commit)
unless `--allow-dirty`. Exit 0 only when every candidate is allowed; 1 when one is denied; 2 on
bad input (including a dirty tree).

Everything it writes goes under the state directory (default ROOT/.trace, which git status and
the package set's digest both ignore): the verify results, the decisions, the merged policy
directory (`STATE/policy`, what `trace verify-bundle --identity` should be given) and the bundles
(`STATE/bundles/<candidate id>`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.errors import InputError, TraceError, UsageError

if TYPE_CHECKING:
    from engine.candidate import Candidate
    from engine.evidence.bundle import Assembled
    from engine.model import Graph
    from engine.policy.routing import RouteDecision
    from engine.policy.signing import Decision
    from engine.run import RunResult
    from engine.verify.result import VerifyResult

STANDARD_GRAPH = "trace:graphs/verify.toml"
FORK_FILE = "trace.toml"  # a fork-wide pipeline entry, as `trace verify` reads it
BUILDER_ID = "urn:trace:builder:fork"  # docs/evidence.md
GIT_DEADLINE = 60.0


# Plain dataclasses, not pydantic: this module is imported for every `trace --help` (its parser
# is registered in engine.cli), and pydantic would add ~60 ms there. Nothing is parsed into them.


@dataclass(frozen=True)
class ForkConfig:
    """Where everything of one `trace fork` run is, all absolute."""

    root: Path  # the fork's git work tree
    package_set: Path
    config: Path  # the fork's trace folder
    candidates: Path
    steps: Path | None  # the fork's own steps (None: none)
    policy: Path | None  # the fork's policy overrides (None: none)
    state: Path
    bundles: Path


@dataclass
class Outcome:
    """One row of the summary table (and of the JSON report)."""

    candidate: str
    file: str
    package: str = ""
    verified: bool | None = None
    verify_reasons: list[str] = field(default_factory=list)
    route: str = ""
    decision: Literal["allow", "deny", "error"] = "error"
    decision_reasons: list[str] = field(default_factory=list)
    bundle: str | None = None
    signed: Literal["key", "keyless", "no"] = "no"
    note: str = ""
    built: int = 0  # steps built now
    reused: int = 0  # steps evaluated, their output already in the store
    cached: int = 0  # steps answered from the index (no evaluation)
    steps: list[str] = field(default_factory=list)  # step ids of the candidate's graph


@dataclass
class ForkReport:
    """`trace fork --json` (schema trace.fork/v1), also written to STATE/fork/report.json."""

    fork: str
    commit: str | None
    dirty: bool
    candidates: list[Outcome]
    schema: Literal["trace.fork/v1"] = "trace.fork/v1"

    @property
    def exit_code(self) -> int:
        if any(o.decision == "error" for o in self.candidates):
            return 2
        return 0 if all(o.decision == "allow" for o in self.candidates) else 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


# ---- git ---------------------------------------------------------------------------------


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=GIT_DEADLINE,
            check=False,
        )
    except FileNotFoundError:
        raise UsageError(
            "git is not installed", hint="install git; trace pins the fork's commit"
        ) from None
    except subprocess.TimeoutExpired:
        raise TraceError(f"git {' '.join(args)} took longer than {GIT_DEADLINE:.0f} s") from None


def git_root(path: Path) -> Path:
    proc = _git(path, "rev-parse", "--show-toplevel")
    if proc.returncode != 0:
        raise UsageError(
            f"{path} is not inside a git work tree",
            hint="run `nix run .#verify` at the root of your nixpkgs fork (a git checkout), "
            "or pass --fork DIR",
        )
    return Path(proc.stdout.strip()).resolve()


def git_commit(root: Path) -> str | None:
    proc = _git(root, "rev-parse", "--verify", "-q", "HEAD")
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def dirty_paths(root: Path, exclude: list[Path]) -> list[str]:
    """Changed, staged or untracked (not ignored) paths, except trace's own output dirs."""
    specs = [
        f":(exclude){p.relative_to(root).as_posix()}" for p in exclude if p.is_relative_to(root)
    ]
    proc = _git(root, "status", "--porcelain=v1", "--untracked-files=all", "--", ".", *specs)
    if proc.returncode != 0:
        raise TraceError(f"git status failed in {root}: {proc.stderr.strip()}")
    return [line[3:] for line in proc.stdout.splitlines() if line.strip()]


# ---- configuration -----------------------------------------------------------------------


def _inside(root: Path, value: str, what: str) -> Path:
    path = (root / value).resolve()
    if not path.is_relative_to(root):
        raise UsageError(
            f"{what} '{value}' is outside the fork {root}", hint="use a path inside it"
        )
    return path


def make_config(args: argparse.Namespace) -> ForkConfig:
    root = git_root((args.fork or Path.cwd()).resolve())
    config = _inside(root, args.config, "--config")
    candidates = _inside(root, args.candidates or f"{args.config}/candidates", "--candidates")
    if not candidates.is_dir():
        raise UsageError(
            f"no candidates folder at {candidates}",
            hint=f"put each fix candidate in {args.config}/candidates/<name>/candidate.toml "
            "(`nix flake init -t <trace>#fork` creates the layout)",
        )
    steps = _inside(root, args.steps, "--steps") if args.steps else config / "steps.toml"
    if args.steps and not steps.is_file():
        raise UsageError(f"--steps file {steps} does not exist")
    policy = _inside(root, args.policy, "--policy") if args.policy else config / "policy"
    if args.policy and not policy.is_dir():
        raise UsageError(f"--policy folder {policy} does not exist")
    state = (args.state_dir or root / ".trace").resolve()
    return ForkConfig(
        root=root,
        package_set=_inside(root, args.package_set, "--package-set"),
        config=config,
        candidates=candidates,
        steps=steps if steps.is_file() else None,
        policy=policy if policy.is_dir() else None,
        state=state,
        bundles=(args.out or state / "bundles").resolve(),
    )


def discover(cfg: ForkConfig, names: list[str]) -> list[Path]:
    """Candidate files: every `<name>/candidate.toml` and `<name>.toml`, or the named ones."""
    found: dict[str, Path] = {}
    for d in sorted(cfg.candidates.iterdir()):
        if d.is_dir() and (d / "candidate.toml").is_file():
            found[d.name] = d / "candidate.toml"
        elif d.is_file() and d.suffix == ".toml":
            found[d.stem] = d
    if not names:
        if not found:
            raise UsageError(
                f"no candidates in {cfg.candidates}",
                hint="add <name>/candidate.toml (see `trace schema candidate`)",
            )
        return list(found.values())
    chosen: list[Path] = []
    for name in names:
        as_path = Path(name)
        if name in found:
            chosen.append(found[name])
        elif as_path.is_file():
            chosen.append(as_path.resolve())
        else:
            raise UsageError(
                f"unknown candidate '{name}'",
                hint=f"candidates in {cfg.candidates}: {', '.join(found) or 'none'}",
            )
    return chosen


def write_if_changed(path: Path, data: bytes) -> None:
    """Atomic write (tmp + os.replace) that leaves an identical file untouched."""
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _declared_excludes(files: list[Path]) -> list[str]:
    import tomli

    found: list[str] = []
    for f in files:
        try:
            nix = tomli.loads(f.read_text(encoding="utf-8")).get("nix", {})
        except (OSError, tomli.TOMLDecodeError):
            continue  # the graph loader reports it, with its location
        found += [str(x) for x in nix.get("package_set_exclude", []) if isinstance(x, str)]
    return found


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
    text = (
        "# Written by `trace fork`: the verify pipeline with this fork's own steps.\n"
        "version = 1\n"
        f"include = {json.dumps(includes)}\n"
        "\n[nix]\n"
        f"package_set_exclude = {json.dumps(exclude)}\n"
    )
    entry = cfg.state / "fork" / candidate_id / "pipeline.toml"
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


def merged_policy(cfg: ForkConfig) -> Path:
    """STATE/policy: the shipped policy files, each replaced by the fork's file of that name."""
    from engine.policy.registry import policy_dir

    files: dict[str, Path] = {p.name: p for p in policy_dir().iterdir() if p.is_file()}
    if cfg.policy is not None:
        files.update({p.name: p for p in cfg.policy.iterdir() if p.is_file()})
    dest = cfg.state / "policy"
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.iterdir():
        if stale.name not in files and stale.is_file():
            stale.unlink()
    for name, src in sorted(files.items()):
        write_if_changed(dest / name, src.read_bytes())
    return dest


# ---- one candidate -----------------------------------------------------------------------


class Signer:
    """Signs allowed bundles with a key, or keyless with a token found once (lazily)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.key: Path | None = args.key
        self.explicit: str | None = args.identity_token
        self.trust_config: Path | None = args.trust_config
        self.enabled = not args.no_sign
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

    def sign(self, statement: bytes) -> tuple[str | None, Literal["key", "keyless", "no"], str]:
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
        from engine.signing.keyless import sign_keyless

        return sign_keyless(statement, token=token, trust_config=self.trust_config), "keyless", ""


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
) -> Decision:
    """As `trace decide`, over the verdict judged from this run's builds (never the result file
    written beside it); waivers apply only when the fork has its own waivers file."""
    from engine.evidence.collect import evidence_sources, gate_records
    from engine.policy.evidence import Evidence
    from engine.policy.registry import SIGNING
    from engine.policy.signing import decide, load_signing
    from engine.policy.waivers import NO_WAIVERS, load_waivers

    signing, catalogue = load_signing(policy / SIGNING)
    waivers = load_waivers(waivers_file, catalogue) if waivers_file else NO_WAIVERS
    gates = gate_records(verify, run)
    evidence = Evidence(
        candidate=verify.candidate,
        verify=verify,
        gates=gates,
        sources=evidence_sources(verify, gates),
    )
    return decide(evidence, routing, signing, catalogue, waivers, dt.datetime.now(dt.UTC).date())


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
    ran: tuple[dt.datetime, dt.datetime] | None = None,
) -> Assembled:
    from engine.evidence.collect import (
        assemble_evidence,
        candidate_entries,
        gate_entries,
        gate_records,
        outcome_entries,
        verify_entry,
    )

    entries = candidate_entries(candidate) + outcome_entries(run)
    entries.append(verify_entry(verify))
    entries += gate_entries(gate_records(verify, run))
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
    )


def replace_bundle(dest: Path, assembled: Assembled, signature: str | None) -> Path:
    """Write the bundle beside `dest`, then swap it in: a reader never sees half a bundle."""
    from engine.evidence.bundle import write_bundle

    dest.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new.", dir=dest.parent))
    fresh.rmdir()
    write_bundle(fresh, assembled, signature)
    old = None
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
        os.replace(dest, old / dest.name)
    os.replace(fresh, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return dest


def verify_candidate(
    cfg: ForkConfig,
    file: Path,
    policy: Path,
    signer: Signer,
    *,
    dirty: bool,
    jobs: int | None,
    progress: bool,
    wait: float,
) -> Outcome:
    from engine.cache import Index
    from engine.candidate import load_candidate
    from engine.graph import load_graph
    from engine.hashing import StatCache
    from engine.policy.registry import WAIVERS
    from engine.progress import Progress
    from engine.run import run_graph
    from engine.verify.command import project_root, verify_context
    from engine.verify.trusted import from_store
    from engine.verify.verdict import judge

    candidate = load_candidate(file)
    cid = candidate.spec.id
    entry = pipeline_entry(cfg, cid)
    root = project_root(cfg.package_set)
    # the gates apply the very policy that decides (its merged copy has the same bytes)
    signing = signing_source(cfg, policy)
    # One lock for the whole candidate: the build, the verify result, the decision and the
    # bundle swap (two `trace fork` runs must not interleave their writes).
    with Index(cfg.state, wait=wait) as index:
        hasher = StatCache(index.db)
        graph = load_graph(
            entry,
            root=root,
            context=verify_context(candidate, cfg.package_set, signing),
            hasher=hasher,
            variant=cid,
        )
        hasher.flush()
        began = dt.datetime.now(dt.UTC)
        with Progress(enabled=progress) as reporter:
            run = run_graph(graph, index, jobs=jobs, reporter=reporter)
        run = from_store(graph, run, index, recheck=True)  # the index is never evidence
        ran = (began, dt.datetime.now(dt.UTC))
        verify = judge(candidate, graph, run)
        result = cfg.state / "verify" / f"{cid}.json"
        write_if_changed(result, (verify.model_dump_json(indent=2, by_alias=True) + "\n").encode())
        routing = _route(candidate, policy)
        own_waivers = cfg.policy / WAIVERS if cfg.policy else None
        waivers = policy / WAIVERS if own_waivers and own_waivers.is_file() else None
        # every gate record (the standard gates and the fork's own steps) comes from the run
        decision = _decide(run, verify, routing, policy, waivers)
        write_if_changed(
            cfg.state / "decisions" / f"{cid}.json",
            (decision.model_dump_json(indent=2, by_alias=True) + "\n").encode(),
        )
        assembled = _assemble(
            candidate, graph, run, verify, routing, decision, root, dirty, signing, ran
        )
        signature: str | None = None
        how: Literal["key", "keyless", "no"] = "no"
        note = ""
        if decision.decision == "allow":
            signature, how, note = signer.sign(assembled.statement_bytes)
        bundle = replace_bundle(cfg.bundles / cid, assembled, signature)
    statuses = [r.status for r in run.steps.values()]
    return Outcome(
        candidate=cid,
        file=str(file),
        package=candidate.spec.package,
        verified=verify.passed,
        verify_reasons=verify.reasons,
        route=routing.state,
        decision=decision.decision,
        decision_reasons=[r.code for r in decision.reasons],
        bundle=str(bundle),
        signed=how,
        note=note,
        built=sum(s == "built" for s in statuses),
        reused=sum(s == "reused" for s in statuses),
        cached=sum(s == "cached" for s in statuses),
        steps=sorted(run.steps),
    )


# ---- command -----------------------------------------------------------------------------


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fork",
        help="verify every fix candidate of a nixpkgs fork: bundles, signatures, one table",
        description="What `nix run .#verify` runs at a fork's root. Exit 0 when every candidate "
        "is allowed, 1 when one is denied, 2 on bad input (a dirty tree included).",
    )
    p.add_argument("candidates_", nargs="*", metavar="CANDIDATE", help="names (default: all)")
    p.add_argument("--fork", type=Path, default=None, help="the fork (default: current dir)")
    p.add_argument("--package-set", default=".", help="relative to the fork root (default: .)")
    p.add_argument("--config", default="trace", help="the fork's trace folder (default: trace)")
    p.add_argument("--candidates", default=None, help="default: CONFIG/candidates")
    p.add_argument(
        "--steps", default=None, help="the fork's own steps (default: CONFIG/steps.toml)"
    )
    p.add_argument("--policy", default=None, help="policy overrides (default: CONFIG/policy)")
    p.add_argument("--state-dir", type=Path, default=None, help="default: ROOT/.trace")
    p.add_argument("--out", type=Path, default=None, help="bundles (default: STATE/bundles)")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="verify uncommitted changes too (the replay record then says dirty)",
    )
    p.add_argument("--key", type=Path, default=None, help="sign offline with this private key")
    p.add_argument("--identity-token", default=None, help="OIDC token for keyless signing")
    p.add_argument("--trust-config", type=Path, default=None, help="Sigstore ClientTrustConfig")
    p.add_argument("--no-sign", action="store_true", help="never sign")
    p.add_argument("-j", "--jobs", type=int, default=None, help="parallel builds (nix -j)")
    p.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="wait for the state")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write DIR/index.html, a findings page of every candidate (engine.report)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.set_defaults(handler=cmd_fork)


def check_clean(cfg: ForkConfig, allow_dirty: bool) -> bool:
    changed = dirty_paths(cfg.root, [cfg.state, cfg.bundles])
    if changed and not allow_dirty:
        shown = "\n    ".join(changed[:10]) + ("\n    …" if len(changed) > 10 else "")
        raise InputError(
            f"the work tree has uncommitted changes:\n    {shown}",
            file=cfg.root,
            hint="commit or stash them first (every bundle's replay record pins the commit), "
            "or pass --allow-dirty to verify them anyway (the record then says dirty)",
        )
    return bool(changed)


def print_table(report: ForkReport, cfg: ForkConfig) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"trace fork {cfg.root} ({(report.commit or 'no commit')[:12]})")
    table.add_column("candidate", no_wrap=True)
    for col in ("verify", "route", "signing", "bundle", "steps"):
        table.add_column(col, overflow="fold")
    for o in report.candidates:
        if o.decision == "error":
            table.add_row(o.candidate, "[bold red]error[/]", "", "", o.note, "")
            continue
        verify = (
            "[green]holds[/]" if o.verified else "[red]fails[/]\n" + "\n".join(o.verify_reasons)
        )
        signing = "[green]allow[/]" if o.decision == "allow" else "[red]deny[/]"
        signing += "".join(f"\n{r}" for r in o.decision_reasons)
        bundle = f"signed ({o.signed})" if o.signed != "no" else "unsigned"
        if o.note:
            bundle += f"\n{o.note}"
        steps = f"{o.built} built\n{o.reused} reused\n{o.cached} cached"
        table.add_row(o.candidate, verify, o.route, signing, bundle, steps)
    console = Console(width=max(140, Console().width))
    console.print(table)
    n_ok = sum(o.decision == "allow" for o in report.candidates)
    console.print(f"{n_ok} of {len(report.candidates)} candidates allowed")
    console.print(f"bundles: {cfg.bundles}/<candidate id>")
    console.print(
        f"check one: trace verify-bundle {cfg.bundles}/<candidate id> "
        f"--identity {cfg.state}/policy/signing-identity.json (key-signed: add --key KEY.pub)"
    )


def cmd_fork(args: argparse.Namespace) -> int:
    from engine.errors import BusyError

    cfg = make_config(args)
    dirty = check_clean(cfg, args.allow_dirty)
    files = discover(cfg, args.candidates_)
    policy = merged_policy(cfg)
    signer = Signer(args)
    outcomes: list[Outcome] = []
    for file in files:
        try:
            outcomes.append(
                verify_candidate(
                    cfg,
                    file,
                    policy,
                    signer,
                    dirty=dirty,
                    jobs=args.jobs,
                    progress=not args.quiet and not args.json,
                    wait=args.wait,
                )
            )
        except BusyError:
            raise
        except TraceError as exc:
            print(f"trace: error: {exc.render()}", file=sys.stderr)
            outcomes.append(Outcome(candidate=file.parent.name, file=str(file), note=exc.message))
    report = ForkReport(
        fork=str(cfg.root), commit=git_commit(cfg.root), dirty=dirty, candidates=outcomes
    )
    write_if_changed(cfg.state / "fork" / "report.json", report.to_json().encode())
    if args.report is not None:
        from engine.report.findings import fork_findings

        page = fork_findings(args.report.resolve(), outcomes, policy, args.key)
        print(f"findings: {page}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(report.to_json(), end="")
    else:
        print_table(report, cfg)
    return report.exit_code
