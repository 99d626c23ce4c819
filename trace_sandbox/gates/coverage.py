"""Diff coverage: which of the patch's changed lines did the reproducer execute?

Two halves, both run in the sandbox:

* `run` (the coverage-run step): runs the verify pipeline's reproducer harness against the
  coverage build of the post-fix package, with a line tracer added to the harness's
  sitecustomize hook for Python (stdlib `sys.settrace`, only for files of the package), then
  collects C coverage with the host's/toolchain's `gcov --json-format` from the `.gcda` files
  the run wrote and the `.gcno` notes the coverage build saved in
  `$out/share/trace-coverage/<build dir>/`. Writes `coverage.json`: per source file, its
  executable and executed lines.
* `evaluate` (the coverage gate): changed lines = the patch's added lines (new-file numbers);
  measured = those that are executable; covered = measured ∩ executed, by statement: a changed
  line inside a multi-line condition (statements.py) is executable and executed as its
  statement is (gcc counts a clause's test on another line of it, often the one before, and
  leaves the clause's own line at 0: libmodbus' fix of CVE-2022-0367 read 0/1 with its PoC).
  Beside it, the branch arcs of the changed lines' statements (gcov's branch data: taken of
  total) are reported (`details.branches`, not gated). Not measurable (not a
  pass) when the run reported no coverage at all, when ANY changed file that may hold executable
  changed lines was not reported (`coverage.file-not-measured`: a.c fully covered does not
  vouch for b.c, so its lines are neither dropped nor guessed), or when no changed line is
  executable. Whether an unreported file's changed lines may execute is judged from the patch
  text (`may_execute`): blank lines, comments, preprocessor lines and lone braces/`else` do not;
  anything else, in any language, does.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from types import CodeType
from typing import Any

from .applied import applied_policy, threshold
from .codes import RULES, gate_record
from .diff import parse_series
from .landing import landed, load_landing
from .lang import Lang, code_only, is_test_path, language
from .statements import spans, statement_of

# Appended to the harness's sitecustomize (a str.format template: braces doubled).
PY_TRACER = """
import atexit as _cov_atexit, threading as _cov_threading
_COV, _COV_DIR = {{}}, os.path.join(os.environ.get("TMPDIR", "/tmp"), "trace-coverage")
def _cov_global(frame, event, arg):
    fn = frame.f_code.co_filename
    if not fn.startswith(_PKG + "/"):
        return None
    lines = _COV.setdefault(fn[len(_PKG) + 1:], set())
    lines.add(frame.f_lineno)
    def _cov_local(frame, event, arg):
        if event == "line":
            lines.add(frame.f_lineno)
        return _cov_local
    return _cov_local
def _cov_dump():
    os.makedirs(_COV_DIR, exist_ok=True)
    path = os.path.join(_COV_DIR, "py-%d.json" % os.getpid())
    with open(path, "w") as fh:
        json.dump({{k: sorted(v) for k, v in _COV.items()}}, fh)
sys.settrace(_cov_global)
_cov_threading.settrace(_cov_global)
_cov_atexit.register(_cov_dump)
"""


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read()


def changed_text(patches: list[str]) -> dict[str, dict[int, str]]:
    """Added lines (new-file number -> text) per changed source file; tests and deletions
    excluded. A later patch of the series wins for a line number both touch."""
    out: dict[str, dict[int, str]] = {}
    for f in parse_series(patches).files:
        if f.new_path is None or f.binary or is_test_path(f.new_path):
            continue
        for ln in f.added:
            if ln.new_no is not None:
                out.setdefault(f.new_path, {})[ln.new_no] = ln.text
    return {path: dict(sorted(lines.items())) for path, lines in out.items()}


def changed_lines(patches: list[str]) -> dict[str, list[int]]:
    """Added lines (new-file numbers) per changed source file; tests and deletions excluded."""
    return {path: list(lines) for path, lines in changed_text(patches).items()}


_NOT_CODE = {
    "c": re.compile(r"(?:[{}();,\s]|\belse\b)*"),
    "python": re.compile(r"(?:[\[\](){},:\s]|\b(?:else|try|finally)\b)*"),
}
_C_COMMENT_CONTINUATION = re.compile(r"\*(?:\s|/|$)")


def may_execute(text: str, lang: Lang) -> bool:
    """Could this changed line carry executable code? Used only for files the coverage data does
    not report, so it errs towards yes: only what clearly is not code says no."""
    if lang in ("c", "python"):
        code = code_only(text, lang).strip()
        if not code:
            return False  # blank, a comment, or a string alone (a docstring line)
        if lang == "c" and (code.startswith("#") or _C_COMMENT_CONTINUATION.match(code)):
            return False  # a preprocessor line, or the inside of a block comment
        return _NOT_CODE[lang].fullmatch(code) is None
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith(("#", "//", "/*", "*"))


def python_executable_lines(source: str, filename: str = "<patched>") -> set[int]:
    """Lines that carry bytecode, as the interpreter's line events report them."""
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return set()
    lines: set[int] = set()
    stack: list[CodeType] = [code]
    while stack:
        co = stack.pop()
        for _, _, line in co.co_lines():
            if line is not None and line > 0:
                lines.add(line)
        stack.extend(c for c in co.co_consts if isinstance(c, CodeType))
    return lines


def match_path(patch_path: str, candidates: list[str]) -> str | None:
    """The coverage path that names the patch's file: equal, or the one sharing the longest
    path suffix with it (at least the file name: installed `lib/python3.12/site-packages/pager/
    __init__.py` for the source `src/pager/__init__.py`); a tie between several is no match
    (two `__init__.py` are not told apart by name: `find_by_content` tells them apart)."""
    if patch_path in candidates:
        return patch_path
    want = patch_path.split("/")
    best: list[str] = []
    best_len = 0
    for c in candidates:
        have = c.split("/")
        n = 0
        while n < min(len(want), len(have)) and want[-1 - n] == have[-1 - n]:
            n += 1
        if n > best_len:
            best, best_len = [c], n
        elif n == best_len and n:
            best.append(c)
    return best[0] if len(best) == 1 else None


def find_by_content(patched: str, root: str, names: list[str]) -> str | None:
    """The file under `root` (relative paths `names`) whose bytes equal the patched source
    file `patched` (the patched-source step's copy): how a renamed or relocated install is
    found. The same name first; then any file of the same extension."""
    try:
        with open(patched, "rb") as fh:
            want = fh.read()
    except OSError:
        return None
    base = os.path.basename(patched)
    ext = os.path.splitext(base)[1]
    ordered = [n for n in names if os.path.basename(n) == base]
    ordered += [n for n in names if n.endswith(ext) and os.path.basename(n) != base]
    for rel in ordered:
        path = os.path.join(root, rel)
        if os.path.getsize(path) != len(want):
            continue
        with open(path, "rb") as fh:
            if fh.read() == want:
                return rel
    return None


# ---- the run ----


def _gcov(gcov: str, target: str, build_top: str) -> dict[str, dict[str, set[int]]]:
    """Line coverage of every .gcda the run wrote, with the .gcno notes the build saved."""
    notes = os.path.join(target, "share", "trace-coverage")
    files: dict[str, dict[str, set[int]]] = {}
    if not os.path.isdir(notes):
        return files
    for gcno in sorted(glob.glob(os.path.join(notes, "**", "*.gcno"), recursive=True)):
        objdir = os.path.dirname(gcno)[len(notes) :] or "/"
        gcda = os.path.join(objdir, os.path.basename(gcno)[: -len(".gcno")] + ".gcda")
        work = os.path.join(build_top, "trace-gcov", objdir.strip("/"))
        os.makedirs(work, exist_ok=True)
        shutil.copyfile(gcno, os.path.join(work, os.path.basename(gcno)))
        if os.path.exists(gcda):
            shutil.copyfile(gcda, os.path.join(work, os.path.basename(gcda)))
        name = os.path.basename(gcno)[: -len(".gcno")] + ".gcda"
        proc = subprocess.run(
            [gcov, "--branch-probabilities", "--json-format", "--stdout", name],
            cwd=work,
            capture_output=True,
            check=False,
        )
        if proc.returncode != 0 or not proc.stdout.strip():
            continue
        for doc in proc.stdout.decode().splitlines():
            if not doc.strip():
                continue
            for f in json.loads(doc).get("files", []):
                path = os.path.normpath(f["file"])
                if path.startswith(objdir.rstrip("/") + "/"):
                    path = path[len(objdir.rstrip("/")) + 1 :]
                entry = files.setdefault(path, {"executable": set(), "executed": set()})
                for ln in f.get("lines", []):
                    entry["executable"].add(int(ln["line_number"]))
                    if int(ln.get("count", 0)) > 0:
                        entry["executed"].add(int(ln["line_number"]))
                    _branches(entry, ln)
    return files


def _branches(entry: dict[str, Any], ln: dict[str, Any]) -> None:
    """A line's branch arcs as gcov counts them: [taken, total] (exception arcs left out)."""
    arcs = [b for b in ln.get("branches") or [] if not b.get("throw")]
    if not arcs:
        return
    taken = sum(int(b.get("count", 0)) > 0 for b in arcs)
    have = entry.setdefault("branches", {}).setdefault(int(ln["line_number"]), [0, 0])
    have[0], have[1] = have[0] + taken, have[1] + len(arcs)


def _python(
    target: str, tmp: str, wanted: list[str], patched: str | None
) -> tuple[dict[str, dict[str, set[int]]], bool, dict[str, str]]:
    files: dict[str, dict[str, set[int]]] = {}
    traced = False
    for dump in sorted(glob.glob(os.path.join(tmp, "trace-coverage", "py-*.json"))):
        traced = True
        with open(dump, encoding="utf-8") as fh:
            for rel, lines in json.load(fh).items():
                files.setdefault(rel, {"executable": set(), "executed": set()})
                files[rel]["executed"].update(int(x) for x in lines)
    # executable lines of the package's own copies of the changed Python files: found by
    # content (the patched-source step's copy), else by path suffix
    installed = []
    for root, _dirs, names in os.walk(target):
        for n in names:
            if n.endswith(".py"):
                installed.append(os.path.relpath(os.path.join(root, n), target))
    installed.sort()
    sources: dict[str, str] = {}
    for path in wanted:
        rel = None
        if patched:
            rel = find_by_content(os.path.join(patched, path), target, installed)
        rel = rel or match_path(path, installed)
        if rel is None:
            continue
        sources[path] = rel
        entry = files.setdefault(rel, {"executable": set(), "executed": set()})
        entry["executable"] = python_executable_lines(_read(os.path.join(target, rel)), rel)
    return files, traced, sources


def run(cfg: dict[str, Any]) -> int:
    """The coverage-run step: reproducer + collection. Writes $out/outcome.json (the run record)
    and $out/coverage.json."""
    env = os.environ
    out = env["out"]
    tmp = env.get("TMPDIR", "/tmp")
    target = os.path.realpath(env["target"])
    build_failed = os.path.exists(os.path.join(target, ".trace-build-failed"))
    record: dict[str, Any]
    if build_failed:
        record = {"schema": "trace.run/v1", "side": "post", "run": 1, "build": "failed"}
        record["target_ran"] = False
    else:
        from ..harness import main as harness

        hook = getattr(harness, "AUDIT_HOOK", None)
        if not isinstance(hook, str) or "_PKG" not in hook:
            raise RuntimeError("the reproducer harness has no AUDIT_HOOK template with _PKG")
        harness.AUDIT_HOOK = hook + PY_TRACER
        run_out = os.path.join(tmp, "trace-run-out")
        os.environ["out"] = run_out  # noqa: SIM112 - Nix names the output variable `out`
        try:
            harness.main()
        finally:  # the harness module is shared by this process: leave its hook as it was
            harness.AUDIT_HOOK = hook
            os.environ["out"] = out  # noqa: SIM112
        with open(os.path.join(run_out, "outcome.json"), encoding="utf-8") as fh:
            record = json.load(fh)
    patches = [_read(p) for p in cfg["patches"]]
    wanted = list(changed_lines(patches))
    files: dict[str, dict[str, set[int]]] = {}
    tools: list[str] = []
    sources: dict[str, str] = {}
    if not build_failed:
        search = env.get("PATH", "") + ":/usr/bin:/bin"  # the fixture: host gcov via sandbox paths
        gcov = shutil.which(cfg.get("gcov") or "gcov", path=search) or "gcov"
        c_files = _gcov(gcov, target, env.get("NIX_BUILD_TOP", tmp))
        if c_files:
            tools.append("gcov")
            files.update(c_files)
        py_wanted = [p for p in wanted if language(p) == "python"]
        py_files, traced, sources = _python(target, tmp, py_wanted, cfg.get("patched"))
        if traced:
            tools.append("python-settrace")
            files.update(py_files)
    coverage = {
        "schema": "trace.coverage/v1",
        "build": "failed" if build_failed else "ok",
        "tools": tools,
        "sources": sources,
        "files": {k: _file_json(v) for k, v in sorted(files.items())},
    }
    os.makedirs(out, exist_ok=True)
    for name, value in (("outcome.json", record), ("coverage.json", coverage)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as fh:
            json.dump(value, fh, indent=2, sort_keys=True)
            fh.write("\n")
    return 0


def _file_json(v: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"executable": sorted(v["executable"]), "executed": sorted(v["executed"])}
    if v.get("branches"):
        out["branches"] = {str(k): v["branches"][k] for k in sorted(v["branches"])}
    return out


# ---- the gate ----


def _patched_source(cfg: dict[str, Any], path: str) -> str | None:
    """The patched file (the patched-source step's copy, beside its landing.json)."""
    landing = cfg.get("landing")
    if not landing:
        return None
    full = os.path.join(os.path.dirname(str(landing)), "files", path)
    return _read(full) if os.path.isfile(full) else None


def by_statement(
    lines: list[int], data: dict[str, Any], source: str | None, path: str
) -> tuple[list[int], list[int], list[int], dict[int, list[int]]]:
    """(executable, covered, decided, within) of the changed `lines` (`decided`: the lines whose
    statement, not their own count, made them executable or executed; `within`: each changed
    line's multi-line statement, [first, last]): a line that lies in a
    multi-line statement (a condition spanning lines: statements.py) is executable when any line
    of it is, and executed when any line of it ran (its condition was evaluated: gcc counts a
    clause's test where it pleases, often on the line before). Other lines: gcov's own counts."""
    exe, ran = set(data["executable"]), set(data["executed"])
    found = spans(source) if source is not None and language(path) != "python" else []
    executable: list[int] = []
    covered: list[int] = []
    decided: list[int] = []
    within: dict[int, list[int]] = {}
    for n in lines:
        span = statement_of(n, found)
        rng = range(span[0], span[1] + 1) if span else range(n, n + 1)
        if span is not None:
            within[n] = [span[0], span[1]]
        by_line = (n in exe, n in ran)
        by_statement = (any(k in exe for k in rng), any(k in ran for k in rng))
        if span is not None and by_statement != by_line:
            decided.append(n)  # the statement, not the line, decided
        if by_statement[0]:
            executable.append(n)
            if by_statement[1]:
                covered.append(n)
    return executable, covered, decided, within


def branch_share(
    lines: list[int], statements: dict[int, list[int]], data: dict[str, Any]
) -> list[int]:
    """[taken, total] branch arcs of the changed lines and of the statements they lie in."""
    branches: dict[str, list[int]] = data.get("branches") or {}
    wanted = set(lines)
    for first, last in statements.values():
        wanted.update(range(first, last + 1))
    taken = sum(branches[str(n)][0] for n in wanted if str(n) in branches)
    total = sum(branches[str(n)][1] for n in wanted if str(n) in branches)
    return [taken, total]


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: patches, policy (the signing policy's name, version and min_score; no min_score: no
    threshold), coverage (path to a coverage.json), landing (the patched-source step's
    landing.json: where each added line landed; absent: the hunk headers' numbers)."""
    policy = applied_policy(cfg)
    min_score = threshold(policy, "min_score")
    with open(cfg["coverage"], encoding="utf-8") as fh:
        cov: dict[str, Any] = json.load(fh)
    landing = load_landing(cfg.get("landing"))
    stated = changed_text([_read(p) for p in cfg["patches"]])
    changed = {
        path: {landed(landing, path, n): t for n, t in text.items()}
        for path, text in stated.items()
    }
    sources: dict[str, str] = cov.get("sources") or {}
    reported = sorted(cov["files"])
    per_file: list[dict[str, Any]] = []
    measured = covered = 0
    branches = [0, 0]  # taken, total arcs of the changed lines' statements (gcov)
    unmeasured: list[str] = []
    unmapped: list[str] = []
    for path, text in changed.items():
        lines = list(text)
        moved = {n: m for n, m in zip(stated[path], lines, strict=True) if n != m}
        src = sources.get(path) or match_path(path, reported)
        if src is None or src not in cov["files"]:
            code = [n for n, t in text.items() if may_execute(t, language(path))]
            if code and language(path) == "python" and "python-settrace" in cov.get("tools", []):
                unmapped.append(path)
            elif code:
                unmeasured.append(path)
            per_file.append(
                {"file": path, "changed": lines, "measurable": False, "may_execute": code}
                | ({"moved": moved} if moved else {})
            )
            continue
        data = cov["files"][src]
        source = _patched_source(cfg, path)
        executable, hit, decided, within = by_statement(lines, data, source, path)
        branch = branch_share(lines, within, data)
        statements = {n: within[n] for n in decided}
        branches = [branches[0] + branch[0], branches[1] + branch[1]]
        measured += len(executable)
        covered += len(hit)
        per_file.append(
            {
                "file": path,
                "coverage_file": src,
                "mapped_by": "content" if sources.get(path) == src else "path",
                "changed": lines,
                "executable": executable,
                "covered": hit,
                "missed": [n for n in executable if n not in hit],
                "measurable": True,
                "branches": branch,
            }
            | ({"moved": moved} if moved else {})
            | ({"statements": {str(k): v for k, v in statements.items()}} if statements else {})
        )
    rules: list[str] = []
    no_data = cov.get("build") == "failed" or not cov.get("tools")
    if no_data:
        rules.append("coverage.not-measurable")
    elif unmapped:
        rules.append("coverage.path-not-mapped")
    elif unmeasured:
        rules.append("coverage.file-not-measured")
    elif not measured:
        rules.append("coverage.no-executable-lines")
    share = round(covered / measured, 6) if measured else None
    if not rules and share is not None and min_score is not None and share < min_score:
        rules.append("coverage.below-threshold")
    measurable = not rules or rules == ["coverage.below-threshold"]
    summary = f"{covered} of {measured} executable changed line(s) run"
    if any("moved" in f for f in per_file):
        summary += " (lines where the patch landed, not its hunk headers)"
    if any("statements" in f for f in per_file):
        summary += " (a clause of a multi-line condition counted by its statement)"
    if branches[1]:
        summary += f"; {branches[0]} of {branches[1]} branch(es) of the changed statements taken"
    if rules and rules[0] != "coverage.below-threshold":
        summary += f"; {RULES[rules[0]][1]}"
    if unmapped or unmeasured:
        summary += f": {', '.join(unmapped + unmeasured)}; reported: {', '.join(reported[:10])}"
    return gate_record(
        "coverage",
        rules,
        measurable=measurable,
        score=share if measurable else None,
        details={
            "summary": summary,
            "tools": cov.get("tools", []),
            "threshold": min_score,
            "policy": policy,
            "changed_lines": sum(len(v) for v in changed.values()),
            "executable_changed_lines": measured,
            "covered_lines": covered,
            "branches": {"taken": branches[0], "total": branches[1]},
            "branch_share": round(branches[0] / branches[1], 6) if branches[1] else None,
            "files": per_file,
            "unmeasured_files": unmeasured,
            "unmapped_files": unmapped,
            "reported_files": reported[:50],
        },
    )
