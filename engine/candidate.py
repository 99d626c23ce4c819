"""The candidate file: one proposed fix, what it claims, and how to check the claim.

```toml
id = "CVE-2026-1001-cparse"
package = "cparse"                 # attribute path in the package set (pkgs.<package>)
patches = ["fix.patch"]            # applied in order through overrideAttrs
origin = "model"                   # model | human | upstream (routing input)
rationale = "rationale.md"         # optional: why this patch fixes the bug
review = "review.md"               # optional: an independent review

[advisory]
osv = "advisory.json"              # OSV JSON
upstream_fix = "https://github.com/o/r/commit/abc"   # optional

[reproducer]
script = "repro.sh"                # run with sh; $TARGET is the package, data in the cwd
data = ["crash.txt"]
runs = 3                           # independent runs per side (flakiness)

[expect]                           # how the UNPATCHED target must misbehave (some invocation)
signal = "SIGSEGV"                 # or exit_code = 1 (or a list: a set of codes)
sanitizer = "AddressSanitizer: heap-buffer-overflow"
output = "overflow at .*"          # regex over the target's stdout+stderr; also stdout, stderr,
                                   # golden / not_golden (files: exact expected / correct stdout)

[[accept.invocation]]              # how the PATCHED target must behave (default: all exit 0)
args = "long-key"                  # selectors: target, args (regex), index (1-based canonical)
exit_code = 2
stderr = "input rejected"

[model]                            # optional, for model-made patches (replay record)
id = "example-model-2026-01"
prompt = "prompt.txt"
parameters = { temperature = 0 }
```
Paths are relative to the candidate file.

`load_candidate(path)` is strict: every field above that the pipeline needs, every named file
present, every patch a real diff. Routing happens before any model has written a patch or a
reproducer, so `load_candidate(path, for_routing=True)` reads what routing needs only: `id`,
`package`, `origin` and `[advisory]` (whose OSV file must exist); `patches`, `[reproducer]` and
`[expect]` may be absent and the files they name need not exist yet. Unknown keys and wrong
types are still errors. The oracles' models: engine/oracles.py; their rules:
trace_sandbox/gates/oracle.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from engine.errors import InputError
from engine.graphfile import find_line
from engine.loader import (
    Document,
    check_path,
    check_regular,
    read_bytes,
    read_document,
    resolve,
    validate,
)
from engine.oracles import Acceptance, Expectation, Oracle, Strict
from engine.paths import cli

# A candidate id names files (STATE/verify/<id>.json, written through `.<name>.<hex>.tmp`) and
# bundle folders: 128 characters keeps every such name well under the 255-byte limit.
MAX_ID = 128
GOLDEN_HEAD = 4000  # characters of a golden file the judge gets for its messages
GOLDEN_MAX = 1 << 20  # the harness keeps 1 MiB of a stream's head: a longer golden never matches


class Advisory(Strict):
    osv: str = Field(description="OSV advisory JSON file")
    upstream_fix: str | None = Field(default=None, description="upstream fix reference (URL)")
    upstream_patches: list[str] = Field(
        default_factory=list,
        description="the upstream fix as patch files (in order) that apply to the unpatched "
        "package: a third build the candidate's behaviour is compared with, input by input "
        "(the differential gate)",
    )


class Reproducer(Strict):
    script: str = Field(description="shell script run against the build ($TARGET = package)")
    data: list[str] = Field(default_factory=list, description="files copied into the run's cwd")
    runs: int = Field(default=3, ge=1, le=50, description="independent runs per side")


class ModelInfo(Strict):
    id: str
    prompt: str | None = Field(default=None, description="prompt file (its digest is recorded)")
    parameters: dict[str, Any] = Field(default_factory=dict)


RATIONALE = (
    "a FILE, path relative to the candidate file (e.g. rationale.md), explaining why the patch "
    "fixes the bug: not the text itself"
)
REVIEW = "a FILE, path relative to the candidate file (e.g. review.md): an independent review"


class CandidateFile(Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=MAX_ID)
    package: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_'-]*(\.[A-Za-z_][A-Za-z0-9_'-]*)*$")
    patches: list[str] = Field(min_length=1)
    origin: Literal["model", "human", "upstream"] = "model"
    rationale: str | None = Field(default=None, description=RATIONALE)
    review: str | None = Field(default=None, description=REVIEW)
    scope: list[str] = Field(default_factory=list, description="globs the patch may touch")
    advisory: Advisory
    reproducer: Reproducer
    expect: Expectation
    accept: Acceptance = Field(
        default_factory=Acceptance,
        description="how the patched target must behave (default: every invocation exits 0)",
    )
    model: ModelInfo | None = None


class RoutingCandidateFile(Strict):
    """The candidate file as routing reads it: the same keys, only the pipeline's optional."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=MAX_ID)
    package: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_'-]*(\.[A-Za-z_][A-Za-z0-9_'-]*)*$")
    patches: list[str] = Field(default_factory=list, description="may not be written yet")
    origin: Literal["model", "human", "upstream"] = "model"
    rationale: str | None = Field(default=None, description=RATIONALE)
    review: str | None = Field(default=None, description=REVIEW)
    scope: list[str] = Field(default_factory=list)
    advisory: Advisory
    reproducer: Reproducer | None = None
    expect: Expectation | None = None
    accept: Acceptance | None = None
    model: ModelInfo | None = None


class _Loaded(BaseModel):
    """A candidate file and where it lies: its paths are relative to its folder."""

    model_config = ConfigDict(frozen=True)

    path: Path

    @property
    def dir(self) -> Path:
        return self.path.parent

    def file(self, rel: str) -> Path:
        return (self.dir / rel).resolve()


class RoutingCandidate(_Loaded):
    """A candidate loaded for routing (`load_candidate(path, for_routing=True)`)."""

    spec: RoutingCandidateFile


class Candidate(_Loaded):
    """A loaded candidate: the file's content with every path made absolute and checked."""

    spec: CandidateFile

    def context(self) -> dict[str, Any]:
        """Values for `{ var = "candidate.…" }` references in pipeline files."""
        s = self.spec
        return {
            "id": s.id,
            "package": s.package,
            "patches": [str(self.file(p)) for p in s.patches],
            "upstream_patches": [str(self.file(p)) for p in s.advisory.upstream_patches],
            "upstream_named": bool(s.advisory.upstream_patches),
            "scope": list(s.scope),
            "reproducer": {
                "script": str(self.file(s.reproducer.script)),
                "data": [str(self.file(d)) for d in s.reproducer.data],
                "runs": s.reproducer.runs,
            },
            "advisory": str(self.file(s.advisory.osv)),
            "expect": s.expect.model_dump(exclude_none=True),
            "oracles_json": json.dumps(self.oracles(), sort_keys=True),
            # [expect]'s top-level fields as before (the variants gate reads which crash is the bug)
            "expect_json": json.dumps(
                s.expect.model_dump(exclude_none=True, exclude={"invocation", "relation"}),
                sort_keys=True,
            ),
            "file": str(self.path),
        }

    def oracles(self) -> dict[str, Any]:
        """[expect] and [accept] as the sandboxed judge reads them (trace_sandbox/gates/oracle.py):
        exit codes as lists, golden files as {file, sha256, text (a head, for messages)}, each
        per-invocation oracle with its `key` (for error messages)."""
        return {
            "expect": self._oracle_json(self.spec.expect, "expect"),
            "accept": self._oracle_json(self.spec.accept, "accept"),
        }

    def patch_bytes(self, rel: str, index: int, key: str = "patches") -> bytes:
        """One patch's bytes (a regular file, size-capped), errors at `<key>.<index>`."""
        try:
            return read_bytes(self.file(rel), "patch")
        except InputError as exc:
            raise InputError(
                f"patch '{rel}': {exc.message}",
                file=self.path,
                key=f"{key}.{index}",
                hint=exc.hint,
            ) from None

    def patch_texts(self) -> list[str]:
        """The patches as text, in order. The one rule everywhere: a patch is bytes, decoded as
        UTF-8 with surrogateescape, so a Latin-1 patch that `patch` applies is read the same by
        every gate (and `.encode("utf-8", "surrogateescape")` gives its bytes back)."""
        return [
            self.patch_bytes(rel, i).decode("utf-8", "surrogateescape")
            for i, rel in enumerate(self.spec.patches)
        ]

    def _oracle_json(self, o: Oracle, key: str) -> dict[str, Any]:
        out: dict[str, Any] = o.model_dump(exclude_none=True, exclude={"invocation", "relation"})
        if o.exit_code is not None:
            out["exit_code"] = o.codes()
        for name in ("golden", "not_golden"):
            rel = getattr(o, name)
            if rel is not None:
                data = read_bytes(self.file(rel), "golden file")
                out[name] = {
                    "file": rel,
                    "sha256": hashlib.sha256(data).hexdigest(),
                    "text": data[:GOLDEN_HEAD].decode("utf-8", "replace"),
                    "truncated": len(data) > GOLDEN_HEAD,
                }
        if isinstance(o, Expectation | Acceptance):
            out["invocation"] = [
                {**self._oracle_json(e, f"{key}.invocation.{n}"), "key": f"{key}.invocation.{n}"}
                for n, e in enumerate(o.invocation)
            ]
            if o.relation:  # only when declared: other candidates' oracles stay byte-identical
                out["relation"] = [
                    {**r.model_dump(exclude_none=True), "key": f"{key}.relation.{n}"}
                    for n, r in enumerate(o.relation)
                ]
        return out


_HUNK = re.compile(rb"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", re.MULTILINE)
_NEW_FILE = re.compile(rb"^\+\+\+ \S", re.MULTILINE)
_CHANGE = re.compile(rb"^[+-](?![+-]{2} )", re.MULTILINE)


def _patch_problem(data: bytes) -> str | None:
    """Why a patch is not a usable unified diff (None when it is one)."""
    if not _NEW_FILE.search(data):
        return "names no file (no '+++ ' header): it is not a unified diff"
    if not _HUNK.search(data):
        return "has no hunk ('@@ -a,b +c,d @@'): it changes nothing"
    if not _CHANGE.search(data):
        return "adds and removes no line: it changes nothing"
    return None


def _read(path: Path) -> Document:
    return read_document(path, "candidate file")


_Spec = TypeVar("_Spec", CandidateFile, RoutingCandidateFile)


def _validate(model: type[_Spec], doc: Document) -> _Spec:
    return validate(
        model, doc, "candidate file", hint=f"see `{cli('schema candidate')}` for the accepted keys"
    )


def _require_file(cand: Candidate | RoutingCandidate, key: str, rel: str, text: str) -> None:
    target = cand.file(rel)
    if target.exists() and not target.is_file():
        raise InputError(
            f"'{rel}' is not a regular file ({target})",
            file=cand.path,
            key=key,
            line=find_line(text, key.split(".")),
            hint="name a file (not a directory, FIFO or device), relative to the candidate file",
        )
    if not target.is_file():
        raise InputError(
            f"'{rel}' does not exist (looked for {target})",
            file=cand.path,
            key=key,
            line=find_line(text, key.split(".")),
            hint=f"`{key}` is a file path, relative to the candidate file: put the text in a "
            f"file (e.g. {key}.md) and name it here"
            if key in ("rationale", "review")
            else "fix the path (relative to the candidate file)",
        )


def _load_for_routing(path: Path) -> RoutingCandidate:
    doc = _read(path)
    spec = _validate(RoutingCandidateFile, doc)
    cand = RoutingCandidate(path=path, spec=spec)
    _require_file(cand, "advisory.osv", spec.advisory.osv, doc.text)
    return cand


@overload
def load_candidate(path: Path, *, for_routing: Literal[False] = False) -> Candidate: ...


@overload
def load_candidate(path: Path, *, for_routing: Literal[True]) -> RoutingCandidate: ...


def load_candidate(path: Path, *, for_routing: bool = False) -> Candidate | RoutingCandidate:
    """The candidate, checked strictly; `for_routing=True`: only what routing reads (see the
    module docstring)."""
    check_path(path, "candidate file")
    check_regular(path, "candidate file")
    path = resolve(path)
    if for_routing:
        return _load_for_routing(path)
    doc = _read(path)
    text = doc.text
    spec = _validate(CandidateFile, doc)
    cand = Candidate(path=path, spec=spec)
    files = [("patches", p) for p in spec.patches]
    files += [("advisory.upstream_patches", p) for p in spec.advisory.upstream_patches]
    files += [("reproducer.script", spec.reproducer.script), ("advisory.osv", spec.advisory.osv)]
    files += [("reproducer.data", d) for d in spec.reproducer.data]
    for key, rel in [("rationale", spec.rationale), ("review", spec.review)]:
        if rel:
            files.append((key, rel))
    if spec.model and spec.model.prompt:
        files.append(("model.prompt", spec.model.prompt))
    for key, rel in files:
        _require_file(cand, key, rel, text)
    named = [("patches", i, rel) for i, rel in enumerate(spec.patches)]
    ups = spec.advisory.upstream_patches
    named += [("advisory.upstream_patches", i, rel) for i, rel in enumerate(ups)]
    for key, i, rel in named:
        problem = _patch_problem(cand.patch_bytes(rel, i, key))
        if problem:
            raise InputError(
                f"patch '{rel}' {problem}",
                file=path,
                key=f"{key}.{i}",
                line=find_line(text, key.split(".")),
                hint="write the patch as a unified diff (`git diff`, `diff -u`); "
                "an empty or garbled patch would make post-fix identical to pre-fix",
            )
    _check_oracles(cand, text)
    return cand


def _oracles(spec: CandidateFile) -> list[tuple[str, Oracle]]:
    found: list[tuple[str, Oracle]] = []
    for side, top in (("expect", spec.expect), ("accept", spec.accept)):
        found.append((side, top))
        found += [(f"{side}.invocation.{n}", e) for n, e in enumerate(top.invocation)]
    return found


def _check_oracles(cand: Candidate, text: str) -> None:
    """What the models cannot check alone: golden files, [expect] naming a misbehaviour,
    [accept] never accepting a crash."""

    def fail(key: str, msg: str, hint: str) -> InputError:
        keys = key.split(".")
        line = find_line(text, keys) or find_line(text, keys[:1])
        return InputError(msg, file=cand.path, key=key, line=line, hint=hint)

    spec = cand.spec
    for key, o in _oracles(spec):
        for name in ("golden", "not_golden"):
            rel = getattr(o, name)
            if rel is None:
                continue
            _require_file(cand, f"{key}.{name}", rel, text)
            if cand.file(rel).stat().st_size > GOLDEN_MAX:
                raise fail(
                    f"{key}.{name}",
                    f"golden file '{rel}' is larger than {GOLDEN_MAX} bytes",
                    "the harness keeps 1 MiB of a target's stdout; use a smaller case, or "
                    "stdout regexes",
                )
        if key.startswith("accept") and (o.signal or o.sanitizer):
            field = "signal" if o.signal else "sanitizer"
            raise fail(
                f"{key}.{field}",
                "a fatal signal or a sanitizer report after the fix is never acceptable",
                f"remove `{field}` from [accept]; declare a clean rejection instead "
                "(exit_code, stderr)",
            )
    if not any(o.misbehaviour() for k, o in _oracles(spec) if k.startswith("expect")):
        raise fail(
            "expect",
            "[expect] names no failure and no wrong output",
            "say how the unpatched build must misbehave: exit_code (non-zero), signal, "
            "sanitizer, output; or, for a wrong-output bug, stdout/stderr regexes or "
            "not_golden (see `trace schema candidate`)",
        )
