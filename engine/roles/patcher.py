"""The Patcher's answer: a unified diff in a ```diff block and a written rationale; the diff must
apply to the package's source with GNU patch, without fuzz (else `patch-does-not-apply`, with the
hunks that fail)."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from engine.roles.outcome import RoleFailure, fenced

_FILE = re.compile(r"^\+\+\+ \S", re.MULTILINE)
_HUNK = re.compile(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", re.MULTILINE)


class Draft(BaseModel):
    model_config = ConfigDict(frozen=True)

    diff: str
    rationale: str


def parse_patch(answer: str) -> Draft | RoleFailure:
    body = fenced(answer, "diff", "patch")
    if body is None or not _FILE.search(body) or not _HUNK.search(body):
        return RoleFailure(
            reason="model-output-no-diff",
            detail="the answer holds no ```diff block with a '+++ ' header and an '@@' hunk",
        )
    start = answer.find(body)
    rationale = (answer[:start] + answer[start + len(body) :]).replace("```diff", "")
    rationale = re.sub(r"```(patch)?\s*", "", rationale).strip()
    return Draft(diff=body if body.endswith("\n") else body + "\n", rationale=rationale + "\n")


def check_applies(diff: str, source: Path) -> RoleFailure | None:
    """None when `patch -p1 --fuzz=0` applies every hunk to a copy of `source`."""
    with tempfile.TemporaryDirectory(prefix="trace-apply-") as tmp:
        patch_file = Path(tmp) / "draft.patch"
        patch_file.write_text(diff, encoding="utf-8")
        proc = subprocess.run(
            [
                "patch",
                "-p1",
                "--dry-run",
                "--batch",
                "--fuzz=0",
                "--no-backup-if-mismatch",
                "-d",
                str(source),
                "-i",
                str(patch_file),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    if proc.returncode == 0:
        return None
    lines = [
        ln.strip()
        for ln in (proc.stdout + proc.stderr).splitlines()
        if "FAILED" in ln
        or "can't find file" in ln
        or "malformed" in ln.lower()
        or "No file to patch" in ln
        or "Only garbage" in ln
    ]
    return RoleFailure(
        reason="patch-does-not-apply",
        detail="; ".join(lines) or (proc.stdout + proc.stderr).strip()[-400:],
    )


def post_fix_tree(diff: str, source: Path) -> dict[str, str] | None:
    """relative path -> sha256 of every file of `source` with `diff` applied (`patch -p1`, as
    check_applies); None when it does not apply. Two patches are the same fix exactly when
    their trees are equal, whatever their text."""
    import hashlib
    import shutil

    with tempfile.TemporaryDirectory(prefix="trace-tree-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(source, tree, symlinks=True)
        patch_file = Path(tmp) / "fix.patch"
        patch_file.write_text(diff, encoding="utf-8", errors="surrogateescape")
        proc = subprocess.run(
            ["patch", "-p1", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "-s",
             "-d", str(tree), "-i", str(patch_file)],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            return None
        return {
            f.relative_to(tree).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(tree.rglob("*"))
            if f.is_file() and not f.is_symlink()
        }
