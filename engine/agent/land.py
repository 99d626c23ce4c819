"""`trace land CANDIDATE --bundle DIR`: a branch on the fork with the patch applied and the
bundle's digest in the commit trailer. Never a push: trace runs no git command that talks to a
remote.

Landing needs what auto-merge means: the routing state `auto-merge-eligible`, a bundle that
`trace verify-bundle` accepts (signature, identity, every file's digest), a signing decision in
it that allows (for a drafted candidate this includes the signing policy's review rule over the
bundled review claims), and for a drafted candidate a draft decision that allows. The
commit is made in a temporary worktree, so the fork's own work tree and index are untouched.
The patch goes into the package's vendored source (`pkgs/PKG/src`, `patch -p1` paths) when the
fork keeps one; otherwise it is added beside the package as `pkgs/PKG/ID.patch` for the package
expression to list (nixpkgs' `patches = [ ./ID.patch ]`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from engine.errors import InputError, TraceError


class LandRefused(TraceError):
    """The candidate may not land (exit 1): the reasons are printed."""

    exit_code = 1


def register(sub: Any) -> None:
    p = sub.add_parser(
        "land",
        help="create a branch on the fork with the verified patch (never pushes)",
        description="Exit 0 with the branch made; 1 when the candidate may not land (reasons "
        "printed); 2 on bad input.",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument("--bundle", type=Path, required=True, help="the candidate's signed bundle")
    p.add_argument("--fork", type=Path, default=None, help="the fork (a git repository)")
    p.add_argument("--key", type=Path, default=None, help="public key of a key-mode bundle")
    p.add_argument("--identity", type=Path, default=None, help="signer lock (keyless)")
    p.add_argument("--branch", default=None, help="default: trace/ID")
    p.set_defaults(handler=cmd_land)


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise InputError(f"git {' '.join(args)} failed: {proc.stderr.strip()}", file=repo)
    return proc.stdout.strip()


def _bundle_ok(args: argparse.Namespace, fork: Path) -> list[str]:
    from engine.cli import main

    argv = ["verify-bundle", str(args.bundle), "--json", "--fork", str(fork)]
    if args.key:
        argv += ["--key", str(args.key)]
    if args.identity:
        argv += ["--identity", str(args.identity)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    if rc == 0:
        return []
    try:
        doc = json.loads(buf.getvalue())
        failed = [c.get("reason") or c.get("name") for c in doc.get("checks", []) if not c["ok"]]
    except (json.JSONDecodeError, KeyError, TypeError):
        failed = []
    return [f"bundle-not-verified: {', '.join(str(f) for f in failed) or f'exit {rc}'}"]


def refusals(args: argparse.Namespace, cand: Any, fork: Path) -> list[str]:
    """Why the candidate may not land (empty: it may). The routing state is the bundle's own
    signed routing decision, which verify-bundle checked against its policy file."""
    out = _bundle_ok(args, fork)
    routing = args.bundle / "payload" / "decisions" / "routing.json"
    state = json.loads(routing.read_text("utf-8")).get("state") if routing.is_file() else None
    if state != "auto-merge-eligible":
        out.append(f"routing-not-auto-merge: {state}")
    signing = args.bundle / "payload" / "decisions" / "signing.json"
    if signing.is_file():
        decision = json.loads(signing.read_text(encoding="utf-8")).get("decision")
        if decision != "allow":
            out.append(f"signing-denied: {decision}")
    else:
        out.append("signing-decision-missing")
    statement = json.loads((args.bundle / "statement.json").read_text(encoding="utf-8"))
    params = statement.get("predicate", {}).get("buildDefinition", {})
    cid = params.get("externalParameters", {}).get("candidate", {}).get("id")
    if cid != cand.spec.id:
        out.append(f"bundle-for-another-candidate: {cid}")
    draft = cand.dir / "draft.json"
    if draft.is_file():
        d = json.loads(draft.read_text(encoding="utf-8"))["decision"]
        if d["decision"] != "allow":
            out.append(f"draft-denied: {', '.join(d['reasons'])}")
    return out


def cmd_land(args: argparse.Namespace) -> int:
    from engine.candidate import load_candidate
    from engine.verify.command import find_fork

    cand = load_candidate(args.candidate)
    fork = (args.fork or find_fork(cand.path) or Path.cwd()).resolve()
    if not (args.bundle / "statement.json").is_file():
        raise InputError("not a bundle (no statement.json)", file=args.bundle)
    top = Path(_git(fork, "rev-parse", "--show-toplevel")).resolve()
    branch = args.branch or f"trace/{cand.spec.id}"
    exists = subprocess.run(
        ["git", "-C", str(top), "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
        capture_output=True,
        check=False,
    )
    if exists.returncode == 0:
        raise InputError(f"branch '{branch}' exists already", file=top,
                         hint="pass --branch NAME or delete the branch")  # fmt: skip
    reasons = refusals(args, cand, fork)
    if reasons:
        for r in reasons:
            print(f"  refused: {r}")
        raise LandRefused(f"{cand.spec.id} may not land", hint="see the reasons above")
    digest = hashlib.sha256((args.bundle / "statement.json").read_bytes()).hexdigest()
    commit = _commit(top, fork, cand, digest)
    _git(top, "branch", branch, commit)
    print(f"landed {cand.spec.id} on branch {branch} ({commit[:12]}); nothing was pushed")
    sys.stdout.flush()
    return 0


def _commit(top: Path, fork: Path, cand: Any, digest: str) -> str:
    s = cand.spec
    rel_pkg = (fork / "pkgs" / s.package).relative_to(top)
    with tempfile.TemporaryDirectory(prefix="trace-land-") as tmp:
        wt = Path(tmp) / "wt"
        _git(top, "worktree", "add", "--detach", str(wt), "HEAD")
        try:
            src = wt / rel_pkg / "src"
            for rel in s.patches:
                patch = cand.file(rel)
                if src.is_dir():
                    _git(wt, "apply", f"--directory={(rel_pkg / 'src').as_posix()}", str(patch))
                else:
                    (wt / rel_pkg).mkdir(parents=True, exist_ok=True)
                    shutil.copy(patch, wt / rel_pkg / f"{s.id}.patch")
            _git(wt, "add", "-A")
            msg = (
                f"{s.package}: fix {s.id} (landed by trace)\n\n"
                "Verified and signed by trace; the bundle's statement digest is below.\n\n"
                f"Trace-Candidate: {s.id}\nTrace-Bundle: sha256:{digest}\n"
            )
            _git(wt, "-c", "commit.gpgsign=false", "commit", "-q", "-m", msg)
            return _git(wt, "rev-parse", "HEAD")
        finally:
            _git(top, "worktree", "remove", "--force", str(wt))
