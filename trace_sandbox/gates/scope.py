"""The scope/minimality gate: what a patch touches, how much, and whether it weakens checks.

All judgements are made on the diff alone, line by line, as a reviewer reads it. A removed
check (assertion, bounds check, error return) counts as removed unless the file gains a check of
the same kind that tests at least the same identifiers (trace_sandbox/gates/checks.py): changing
`klen >= KEY_MAX` to `klen > KEY_MAX - 1` keeps it, trading it for `klen > 100` does not. Added
catch-alls and ignored return codes are compared by count per file. Multi-line constructs are
joined while their brackets are open (a prototype over two lines is one prototype).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable

from ._dataclasses import dataclass, field
from .checks import removed_checks, statements
from .checks import runs as statement_runs
from .codes import code_of, codes
from .diff import FileDiff, Patch, canonical, parse_series
from .lang import Lang, is_header, is_test_path, language
from .poc import PocFacts
from .poc import findings as poc_findings
from .weakrules import ROWS, Row, join_except, was_checked

# Source files of the common languages, and nix expressions; not build-system, CI or docs files.
DEFAULT_SCOPE: tuple[str, ...] = (
    "*.c",
    "*.h",
    "*.cc",
    "*.cpp",
    "*.cxx",
    "*.hh",
    "*.hpp",
    "*.hxx",
    "*.inc",
    "*.py",
    "*.sh",
    "*.bash",
    "*.rs",
    "*.go",
    "*.java",
    "*.js",
    "*.ts",
    "*.rb",
    "*.pl",
    "*.pm",
    "*.lua",
    "*.nix",
)


@dataclass(frozen=True)
class ScopePolicy:
    """The gate's parameters. The size bounds come from the signing policy ([gates.scope]);
    None is no bound."""

    scope: tuple[str, ...] = ()  # the candidate's globs; empty: default_scope
    default_scope: tuple[str, ...] = DEFAULT_SCOPE
    max_files: int | None = None
    max_hunks: int | None = None
    max_lines: int | None = None  # added + removed


@dataclass(frozen=True)
class Finding:
    """A scope rule's finding: the rule, file and line."""

    rule: str
    file: str
    line: int | None
    message: str

    @property
    def code(self) -> str:
        return code_of(self.rule)

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "rule": self.rule,
            "file": self.file,
            "line": self.line,
            "message": self.message,
        }


@dataclass
class _Ctx:
    """The findings of one scope evaluation, as they are added."""

    findings: list[Finding] = field(default_factory=list)

    def add(self, rule: str, f: FileDiff | str, line: int | None, message: str) -> None:
        path = f if isinstance(f, str) else f.path
        code_of(rule)  # unknown rule names fail here, not in a policy later
        self.findings.append(Finding(rule, path, line, message))


# ---- globs ----


def glob_regex(pattern: str) -> re.Pattern[str]:
    """gitignore-like globs: `*` and `?` stay within a path component, `**` crosses them; a
    pattern without `/` matches the file name at any depth."""
    pat = pattern.lstrip("/")
    if "/" not in pat:
        pat = "**/" + pat
    out = ""
    i = 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pat.startswith("**", i):
            out += ".*"
            i += 2
        elif pat[i] == "*":
            out += "[^/]*"
            i += 1
        elif pat[i] == "?":
            out += "[^/]"
            i += 1
        elif pat[i] == "[":
            end = pat.find("]", i + 1)
            if end < 0:
                out += re.escape("[")
                i += 1
            else:
                body = pat[i + 1 : end].replace("\\", "\\\\")
                out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
                i = end + 1
        else:
            out += re.escape(pat[i])
            i += 1
    if pat.endswith("/"):
        out += ".*"
    return re.compile(out + r"\Z")


def _literal_dirs(pattern: str) -> str:
    """Leading directories of a glob without wildcards: `pkgs/cparse/**` -> `pkgs/cparse`."""
    parts = pattern.lstrip("/").split("/")[:-1]
    out: list[str] = []
    for part in parts:
        if any(ch in part for ch in "*?["):
            break
        out.append(part)
    return "/".join(out)


def in_scope(path: str, globs: Iterable[str]) -> bool:
    """Does a patch path match one of the scope globs?

    Patch paths are relative to the package's source tree (`patch -p1`), while a candidate may
    write its scope relative to the fork (`pkgs/cparse/**`): a glob's literal leading
    directories are then taken as the place of the package's sources, so `cparse.c` is also
    tried as `pkgs/cparse/cparse.c`.
    """
    for g in globs:
        rx = glob_regex(g)
        if rx.match(path):
            return True
        prefix = _literal_dirs(g)
        if prefix and not path.startswith(prefix + "/") and rx.match(f"{prefix}/{path}"):
            return True
    return False


# ---- joining multi-line constructs ----


def _side(f: FileDiff, kind: str) -> list[tuple[int | None, str]]:
    lang = language(f.path)
    out: list[tuple[int | None, str]] = []
    for h in f.hunks:
        out.extend(statements(h.lines, kind, lang))
    return out


# ---- public interface ----

_C_PROTO = re.compile(
    r"^(?:extern\s+)?(?!return\b|if\b|while\b|for\b|switch\b|typedef\b|#)"
    r"[A-Za-z_][\w\s\*]*?[\s\*](\w+)\s*\(([^;{]*)\)\s*(?:__attribute__\s*\(\(.*\)\)\s*)?;"
)
_PY_DEF = re.compile(r"^(?:async\s+)?def\s+(\w+)\s*\((.*)\)\s*(?:->\s*(.+?))?\s*:")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"\s*([(),*\[\]=:])\s*", r"\1", text)).strip()


Sig = tuple[int | None, str]


def _signatures(stmts: list[Sig], lang: Lang) -> dict[str, list[Sig]]:
    sigs: dict[str, list[Sig]] = {}
    for line, code in stmts:
        if lang == "c":
            m = _C_PROTO.match(code)
            if m and not code.startswith("static"):
                sigs.setdefault(m.group(1), []).append((line, _norm(code)))
        else:
            m = _PY_DEF.match(code)
            if m and (not m.group(1).startswith("_") or m.group(1).startswith("__")):
                sig = _norm(f"({m.group(2)})->{m.group(3) or ''}")
                sigs.setdefault(m.group(1), []).append((line, sig))
    return sigs


def _check_interface(f: FileDiff, ctx: _Ctx) -> None:
    lang = language(f.path)
    if not ((lang == "c" and is_header(f.path)) or lang == "python") or is_test_path(f.path):
        return
    before = _signatures(_side(f, "-"), lang)
    after = _signatures(_side(f, "+"), lang)
    for name, olds in before.items():
        new_sigs = {s for _, s in after.get(name, [])}
        for line, sig in olds:
            if sig in new_sigs:
                continue
            what = "removed" if name not in after else "changed"
            ctx.add(
                "scope.public-interface-changed",
                f,
                line,
                f"public function '{name}' {what} (was: {sig})",
            )


# ---- weakened checks ----

_TEST_DEF = re.compile(
    r"^(?:async\s+)?def\s+test\w*\s*\(|^class\s+Test\w*|"
    r"^(?:START_TEST|TEST|TEST_F|TEST_P)\s*\(|^(?:static\s+)?void\s+test_\w+\s*\("
)


# a removed check of each kind with no added check testing the same identifiers (checks.py)
_REMOVED = {
    "assert": ("scope.weakened.assert-removed", "assertion removed"),
    "bounds": ("scope.weakened.bounds-check-removed", "bounds check removed"),
    "error-return": ("scope.weakened.error-return-removed", "error return removed"),
}


def _count_rule(
    f: FileDiff,
    ctx: _Ctx,
    code: str,
    matcher: Callable[[str], bool],
    *,
    weaker_side: str,
    what: str,
) -> None:
    """Flag when the weaker side (removed '-' or added '+') has more matches than the other."""
    other = "+" if weaker_side == "-" else "-"
    hits = [(ln, c) for ln, c in _side(f, weaker_side) if matcher(c)]
    others = [c for _, c in _side(f, other) if matcher(c)]
    extra = len(hits) - len(others)
    if extra <= 0:
        return
    # report the matches that have no identical counterpart on the other side
    unmatched = [(ln, c) for ln, c in hits if c not in others] or hits
    for ln, c in unmatched[:extra]:
        ctx.add(code, f, ln, f"{what}: {c[:120]}")


def _stmts(f: FileDiff, kind: str) -> list[Sig]:
    """One side's statements; Python's `except ...:` joined with the statement after it."""
    lang = language(f.path)
    runs = [r for h in f.hunks for r in statement_runs(h.lines, kind, lang)]
    if lang == "python":
        runs = [join_except(r) for r in runs]
    return [s for r in runs for s in r]


def _check_row(f: FileDiff, ctx: _Ctx, row: Row) -> None:
    """One row of the weakened-handling table (weakrules.ROWS) on one file."""
    if row.lang == "any":
        added = [ln for ln in f.added if row.pattern.search(ln.text)]
        removed = [ln.text for ln in f.removed if row.pattern.search(ln.text)]
        for ln in added[len(removed) :]:
            ctx.add(row.rule, f, ln.new_no, f"{row.means}: {ln.text.strip()[:120]}")
        return
    plus, minus = _stmts(f, "+"), _stmts(f, "-")
    if row.how == "was-checked":
        for no, c in was_checked(row, minus, plus):
            ctx.add(row.rule, f, no, f"{row.means}: {c[:120]}")
        return
    hits = [(no, c) for no, c in plus if row.pattern.search(c)]
    others = [c for _, c in minus if row.pattern.search(c)]
    extra = len(hits) - len(others)
    unmatched = [(no, c) for no, c in hits if c not in others] or hits
    for no, c in unmatched[: max(extra, 0)]:
        ctx.add(row.rule, f, no, f"{row.means}: {c[:120]}")


def _check_weakened(f: FileDiff, ctx: _Ctx) -> None:
    lang = language(f.path)
    test_file = is_test_path(f.path)
    if f.status == "deleted" and test_file:
        ctx.add("scope.weakened.test-deleted", f, None, "test file deleted")
        return
    if lang in ("c", "python") and not test_file:
        for check in removed_checks(f):
            rule, what = _REMOVED[check.kind]
            tested = ", ".join(sorted(check.subject)) or "?"
            ctx.add(rule, f, check.line, f"{what} (it tested {tested}): {check.text[:120]}")
    if lang in ("c", "python"):
        _count_rule(
            f,
            ctx,
            "scope.weakened.test-deleted",
            lambda c: bool(_TEST_DEF.match(c)),
            weaker_side="-",
            what="test removed",
        )
    for row in ROWS:
        if row.lang in (lang, "any") and (row.tests_too or not test_file):
            _check_row(f, ctx, row)


# ---- the gate ----


def evaluate(
    patches: list[str], policy: ScopePolicy, poc: PocFacts | None = None
) -> dict[str, object]:
    """The scope gate's GateRecord (as a JSON-ready dict) for a patch series; `poc`: what
    identifies the reproducer's input (poc.collect), for `scope.fix-matches-poc-literal`."""
    series = parse_series(patches)
    return evaluate_parsed(series, policy, poc)


def evaluate_parsed(
    series: Patch, policy: ScopePolicy, poc: PocFacts | None = None
) -> dict[str, object]:
    ctx = _Ctx()
    for path, line, message in poc_findings(series, poc) if poc is not None else []:
        ctx.add("scope.fix-matches-poc-literal", path, line, message)
    globs = policy.scope or policy.default_scope
    changed = 0
    changed_in_scope = 0
    for f in series.files:
        n = len(f.added) + len(f.removed)
        changed += n
        paths = [p for p in (f.old_path, f.new_path) if p is not None]
        outside = [p for p in dict.fromkeys(paths) if not in_scope(p, globs)]
        if outside:
            for p in outside:
                ctx.add("scope.outside-declared-scope", p, None, f"{p} is not in {list(globs)}")
        else:
            changed_in_scope += n
        if f.binary:
            ctx.add("scope.binary-file", f, None, "binary change")
        _check_interface(f, ctx)
        _check_weakened(f, ctx)
    summary = series.summary()
    for code, key, limit in (
        ("scope.too-many-files", "files", policy.max_files),
        ("scope.too-many-hunks", "hunks", policy.max_hunks),
    ):
        if limit is not None and summary[key] > limit:
            ctx.add(code, "", None, f"{summary[key]} {key} (limit {limit})")
    lines = summary["lines_added"] + summary["lines_removed"]
    if policy.max_lines is not None and lines > policy.max_lines:
        ctx.add(
            "scope.too-many-lines", "", None, f"{lines} changed lines (limit {policy.max_lines})"
        )
    reasons = sorted({f.code for f in ctx.findings}, key=codes().index)
    canon = canonical(series)
    return {
        "schema": "trace.gate/v1",
        "gate": "scope",
        "passed": not reasons,
        "measurable": True,
        "score": round(changed_in_scope / changed, 6) if changed else 1.0,
        "reasons": reasons,
        "details": {
            **summary,
            "lines_changed": lines,
            "scope": list(globs),
            "scope_source": "candidate" if policy.scope else "default",
            "limits": {
                "max_files": policy.max_files,
                "max_hunks": policy.max_hunks,
                "max_lines": policy.max_lines,
            },
            "findings": [x.as_dict() for x in ctx.findings],
            "summary": "; ".join(
                f"{x.file}:{x.line}: {x.message}" if x.line else f"{x.file or 'patch'}: {x.message}"
                for x in ctx.findings
            )
            or f"{summary['files']} file(s), {summary['hunks']} hunk(s), {lines} line(s) changed",
            "canonical_diff_sha256": hashlib.sha256(canon.encode()).hexdigest(),
        },
    }
