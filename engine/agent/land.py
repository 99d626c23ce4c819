"""`trace land CANDIDATE --bundle DIR`: a branch on the fork with the patch applied and the
bundle's digest in the commit trailer. Never a push: trace runs no git command that talks to a
remote.

Landing needs what auto-merge means: the routing state `auto-merge-eligible`, a bundle that
`trace verify-bundle` accepts (signature, identity, every file's digest), a signing decision in
it that allows (for a drafted candidate this includes the signing policy's review rule over the
bundled review claims), and for a drafted candidate a draft decision that allows. What lands is
what was signed: the patch bytes come from the bundle's payload (`payload/patches/`, the canonical
zero-context form, applied with `git apply --unidiff-zero`), and a candidate folder whose patch is
not the bundle's is refused (`land-patch-differs`, naming a line that differs); the draft
decision is the bundle's (`payload/agent/draft.json`), never the folder's draft.json. The
commit is made in a temporary worktree, so the fork's own work tree and index are untouched.
The patch goes into the package's vendored source (`pkgs/PKG/src`, `patch -p1` paths) when the
fork keeps one; otherwise it is added beside the package as `pkgs/PKG/ID.patch` for the package
expression to list (nixpkgs' `patches = [ ./ID.patch ]`). The command line is engine/cli/land.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import InputError, TraceError


class LandRefused(TraceError):
    """The candidate may not land (exit 1): `reasons` says why."""

    exit_code = 1

    def __init__(self, message: str, reasons: list[str], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.reasons = reasons


@dataclass(frozen=True)
class Landed:
    """A branch made: the candidate's id, the branch and its commit."""

    candidate: str
    branch: str
    commit: str


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise InputError(f"git {' '.join(args)} failed: {proc.stderr.strip()}", file=repo)
    return proc.stdout.strip()


def _bundle_ok(bundle: Path, fork: Path, key: Path | None, identity: Path | None) -> list[str]:
    """[] when the bundle verifies as `trace verify-bundle --fork FORK` checks it; else why not."""
    import sys

    from engine.audit.verifier import make_verifier

    try:
        verdict = make_verifier(root=fork, identity=identity, keys=[key] if key else [])(bundle)
    except TraceError as exc:
        print(f"trace: error: {exc.render()}", file=sys.stderr)
        return [f"bundle-not-verified: exit {exc.exit_code}"]
    if verdict.passed:
        return []
    failed = [c.reason or c.name for c in verdict.checks if not c.ok]
    return [f"bundle-not-verified: {', '.join(failed) or 'exit 1'}"]


def refusals(
    cand: Any, bundle: Path, fork: Path, key: Path | None = None, identity: Path | None = None
) -> list[str]:
    """Why the candidate may not land (empty: it may). The routing state is the bundle's own
    signed routing decision, which verify-bundle checked against its policy file."""
    out = _bundle_ok(bundle, fork, key, identity)
    routing = bundle / "payload" / "decisions" / "routing.json"
    state = json.loads(routing.read_text("utf-8")).get("state") if routing.is_file() else None
    if state != "auto-merge-eligible":
        out.append(f"routing-not-auto-merge: {state}")
    signing = bundle / "payload" / "decisions" / "signing.json"
    if signing.is_file():
        decision = json.loads(signing.read_text(encoding="utf-8")).get("decision")
        if decision != "allow":
            out.append(f"signing-denied: {decision}")
    else:
        out.append("signing-decision-missing")
    statement = json.loads((bundle / "statement.json").read_text(encoding="utf-8"))
    params = statement.get("predicate", {}).get("buildDefinition", {})
    cid = params.get("externalParameters", {}).get("candidate", {}).get("id")
    if cid != cand.spec.id:
        out.append(f"bundle-for-another-candidate: {cid}")
    # the draft decision the bundle carries (signed), never the folder's draft.json
    draft = bundle / "payload" / "agent" / "draft.json"
    if draft.is_file():
        d = json.loads(draft.read_text(encoding="utf-8")).get("decision") or {}
        if d.get("decision") != "allow":
            out.append(f"draft-denied: {', '.join(d.get('reasons') or ['no decision'])}")
    return out + patch_differences(cand, bundle) + draft_differences(cand, bundle)


def draft_differences(cand: Any, bundle: Path) -> list[str]:
    """Where the folder's draft record or transcripts are not the bundle's (compared as JSON):
    a draft.json forged, deleted or added after signing, or a transcript rewritten, is refused
    (`land-draft-differs`), though land reads only the bundle's."""
    signed = bundle / "payload" / "agent" / "draft.json"
    mine = cand.dir / "draft.json"
    if not signed.is_file():
        if mine.is_file():
            return ["land-draft-differs: the folder has a draft record the bundle does not"]
        return []
    if not mine.is_file():
        return ["land-draft-differs: the bundle holds a draft record, the folder none"]
    doc = _json(signed)
    out = [] if _json(mine) == doc else ["land-draft-differs: draft.json is not the signed one"]
    for step in doc.get("steps") or []:
        rel = str(step.get("transcript") or "")
        theirs = bundle / "payload" / "agent" / "transcripts" / Path(rel).name
        if rel and theirs.is_file() and _json(cand.dir / rel) != _json(theirs):
            out.append(f"land-draft-differs: {rel} is not the signed transcript")
    return out


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def signed_patches(bundle: Path) -> list[Path]:
    """The patch series the bundle signed (payload/patches/NN-name, in order)."""
    folder = bundle / "payload" / "patches"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def patch_differences(cand: Any, bundle: Path) -> list[str]:
    """Where the candidate folder's patches are not the bundle's (compared in the bundle's
    canonical form): land applies the signed bytes, and a folder that says otherwise is refused
    rather than silently overruled."""
    from engine.evidence.payload import canonical_diff

    signed = signed_patches(bundle)
    mine = [canonical_diff(cand.patch_bytes(rel, i)) for i, rel in enumerate(cand.spec.patches)]
    if len(signed) != len(mine):
        return [f"land-patch-differs: the folder has {len(mine)} patch(es), the bundle signed "
                f"{len(signed)}"]  # fmt: skip
    out = []
    for path, rel, data in zip(signed, cand.spec.patches, mine, strict=True):
        if path.read_bytes() != data:
            out.append(f"land-patch-differs: {rel} is not the signed {path.name} "
                       f"({_changed(path.read_bytes(), data)})")  # fmt: skip
    return out


def _changed(signed: bytes, folder: bytes) -> str:
    """How two diffs differ, by their changed lines: a line only the folder has, one only the
    bundle has."""

    def changes(b: bytes) -> set[str]:
        lines = b.decode("utf-8", "replace").splitlines()
        return {ln for ln in lines if ln[:1] in "+-" and not ln.startswith(("+++", "---"))}

    a, b = changes(signed), changes(folder)
    parts = [f"only the folder has {line[:60]!r}" for line in sorted(b - a)[:1]]
    parts += [f"only the bundle has {line[:60]!r}" for line in sorted(a - b)[:1]]
    return "; ".join(parts) or "another header or order"


def land(
    candidate: Path,
    bundle: Path,
    *,
    fork: Path | None = None,
    key: Path | None = None,
    identity: Path | None = None,
    branch: str | None = None,
) -> Landed:
    """Make the candidate's branch on the fork; LandRefused (with its reasons) when it may not
    land."""
    from engine.candidate import load_candidate
    from engine.verify.fork_graph import find_fork

    cand = load_candidate(candidate)
    fork = (fork or find_fork(cand.path) or Path.cwd()).resolve()
    if not (bundle / "statement.json").is_file():
        raise InputError("not a bundle (no statement.json)", file=bundle)
    top = Path(_git(fork, "rev-parse", "--show-toplevel")).resolve()
    branch = branch or f"trace/{cand.spec.id}"
    exists = subprocess.run(
        ["git", "-C", str(top), "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
        capture_output=True,
        check=False,
    )
    if exists.returncode == 0:
        raise InputError(f"branch '{branch}' exists already", file=top,
                         hint="pass --branch NAME or delete the branch")  # fmt: skip
    reasons = refusals(cand, bundle, fork, key, identity)
    if reasons:
        raise LandRefused(f"{cand.spec.id} may not land", reasons, hint="see the reasons above")
    digest = hashlib.sha256((bundle / "statement.json").read_bytes()).hexdigest()
    commit = _commit(top, fork, cand, digest, bundle)
    _git(top, "branch", branch, commit)
    return Landed(candidate=cand.spec.id, branch=branch, commit=commit)


def _commit(top: Path, fork: Path, cand: Any, digest: str, bundle: Path) -> str:
    s = cand.spec
    rel_pkg = (fork / "pkgs" / s.package).relative_to(top)
    with tempfile.TemporaryDirectory(prefix="trace-land-") as tmp:
        wt = Path(tmp) / "wt"
        _git(top, "worktree", "add", "--detach", str(wt), "HEAD")
        try:
            src = wt / rel_pkg / "src"
            signed = signed_patches(bundle)
            for n, patch in enumerate(signed, start=1):
                # the signed bytes (canonical, zero context lines), never the folder's file
                if src.is_dir():
                    where = f"--directory={(rel_pkg / 'src').as_posix()}"
                    _git(wt, "apply", "--unidiff-zero", where, str(patch))
                else:
                    (wt / rel_pkg).mkdir(parents=True, exist_ok=True)
                    name = f"{s.id}.patch" if len(signed) == 1 else f"{s.id}-{n}.patch"
                    shutil.copy(patch, wt / rel_pkg / name)
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
