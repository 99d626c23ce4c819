"""Diff coverage: which of the patch's changed lines did the reproducer execute?

Two halves, both run in the sandbox:

* `run` (the coverage-run step): runs the verify pipeline's reproducer harness against the
  coverage build of the post-fix package, with a line tracer added to the harness's
  sitecustomize hook for Python (stdlib `sys.settrace`, only for files of the package), then
  collects C coverage with the host's/toolchain's `gcov --json-format` from the `.gcda` files
  the run wrote and the `.gcno` notes the coverage build saved in
  `$out/share/trace-coverage/<build dir>/`. Writes `coverage.json`: per source file, its
  executable and executed lines.
* `evaluate` (the coverage gate, coverage_gate.py): changed lines = the patch's added lines
  (new-file numbers); measured = those that are executable; covered = measured ∩ executed, by
  statement: a changed line inside a multi-line condition (statements.py) is executable and
  executed as its statement is (gcc counts a clause's test on another line of it, often the one
  before, and leaves the clause's own line at 0: libmodbus' fix of CVE-2022-0367 read 0/1 with
  its PoC).
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

from .diff import parse_series
from .lang import Lang, code_only, is_test_path, language

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Appended to the harness's sitecustomize (a str.format template: braces doubled).
PY_TRACER = """
import atexit as _cov_atexit, json, threading as _cov_threading
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
    if sys.gettrace() is not _cov_global:  # dropped by CPython: a call at the recursion limit
        open(os.path.join(_COV_DIR, "py-%d.lost" % os.getpid()), "w").close()
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


def tracer_lost(tmp: str) -> bool:
    """Did a traced Python process lose the line tracer before it exited? CPython drops a
    trace function whose own call fails, and at the recursion limit the tracer's call is the one
    that fails: every line the process ran afterwards (the `except RecursionError` handler a
    fix adds) went unrecorded."""
    return bool(glob.glob(os.path.join(tmp, "trace-coverage", "py-*.lost")))


def _python(
    target: str, tmp: str, wanted: list[str], patched: str | None
) -> tuple[dict[str, dict[str, set[int]]], bool, dict[str, str]]:
    files: dict[str, dict[str, set[int]]] = {}
    traced = False
    for dump in sorted(glob.glob(os.path.join(tmp, "trace-coverage", "py-*.json"))):
        traced = True
        with open(dump, encoding="utf-8") as fh:
            for name, lines in json.load(fh).items():
                # a module found through `bin/../lib/…` (a script's own sys.path entry) is the
                # installed file: one name, or its hits are never matched to its lines
                rel = os.path.normpath(name)
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
        "tracer_lost": not build_failed and tracer_lost(tmp),
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
