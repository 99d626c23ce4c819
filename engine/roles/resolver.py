"""The resolver: an advisory's FIX reference -> a grounded upstream reference.

Offline, the upstream patch is read from a local mirror directory (`COMMIT.patch`, as
`git format-patch` or a forge's `/commit/SHA.patch` writes it); online (`fetch=True`), from the
forge's `URL.patch` under a deadline, and kept in the mirror when one is given. Grounding: the
patch's own `From SHA` header names the commit the advisory names, its digest is recorded, and
(given the package's source) it applies, or the hunks that do not are named. Without the patch
the reference stays ungrounded (`patch = None`) and says why (reason codes upstream-*).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

_COMMIT = re.compile(r"/commit/([0-9a-fA-F]{7,40})(?:\.patch|\.diff)?/?$")
_FROM = re.compile(r"^From ([0-9a-f]{40}) ", re.MULTILINE)
_FILES = re.compile(r"^\+\+\+ b/(\S+)", re.MULTILINE)


class UpstreamRef(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str
    commit: str | None = Field(description="the commit id the advisory's reference names")
    patch: str | None = Field(default=None, description="the upstream patch text, when found")
    sha256: str | None = None
    source: str | None = Field(default=None, description="where the patch was read from")
    files: list[str] = Field(default_factory=list, description="files the patch changes")
    grounded: bool = False
    problems: list[str] = Field(default_factory=list)


def commit_of(url: str) -> str | None:
    m = _COMMIT.search(url)
    return m.group(1).lower() if m else None


def fetch_patch(url: str, deadline_s: float) -> tuple[bytes | None, str]:
    """(the forge's patch for a commit URL, or None; what happened), under a deadline."""
    import urllib.error
    import urllib.request

    target = url.rstrip("/")
    target = target if target.endswith((".patch", ".diff")) else target + ".patch"
    if not target.startswith(("https://", "http://")):
        return None, f"not an http(s) URL: {target}"
    try:
        with urllib.request.urlopen(target, timeout=deadline_s) as resp:
            return resp.read(4 * 1024 * 1024), target
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        return None, f"{target}: {exc}"


def resolve(
    url: str,
    mirror: Path | None,
    source: Path | None = None,
    *,
    fetch: bool = False,
    deadline_s: float = 30.0,
) -> UpstreamRef:
    commit = commit_of(url)
    if commit is None:
        return UpstreamRef(url=url, commit=None, problems=["upstream-not-a-commit"])
    found = sorted(mirror.glob(f"{commit}*.patch")) if mirror and mirror.is_dir() else []
    if found:
        data, where = found[0].read_bytes(), str(found[0])
    elif fetch:
        got, where = fetch_patch(url, deadline_s)
        if got is None:
            return UpstreamRef(
                url=url, commit=commit, problems=[f"upstream-patch-not-fetched: {where}"]
            )
        data = got
        if mirror is not None:
            mirror.mkdir(parents=True, exist_ok=True)
            (mirror / f"{commit}.patch").write_bytes(data)
    else:
        return UpstreamRef(url=url, commit=commit, problems=["upstream-patch-not-fetched"])
    text = data.decode("utf-8", "replace")
    problems: list[str] = []
    named = _FROM.search(text)
    if named is None or not named.group(1).startswith(commit):
        problems.append("upstream-commit-mismatch")
    if source is not None:
        from engine.roles.patcher import check_applies

        failure = check_applies(text, source)
        if failure is not None:
            problems.append(f"upstream-patch-does-not-apply: {failure.detail}")
    return UpstreamRef(
        url=url,
        commit=commit,
        patch=text,
        sha256=hashlib.sha256(data).hexdigest(),
        source=where,
        files=_FILES.findall(text),
        grounded=not problems,
        problems=problems,
    )
