"""Is a built mutant worth a reproducer run? Stillborn, equivalent, or not code.

Runs in the mutant-run step, after the mutant's build, before its run, with the post-fix build
beside it:

* ``stillborn``: the mutant does not build (applies or compiles), or a mutated Python file does
  not compile, or does not import while the patched one does (its module imported alone, in a
  fresh interpreter, from each build's own site directory; a module that cannot be imported
  alone on either side is left to the run). It is no mutant: counted nowhere (it says nothing
  about the reproducer).
* ``equivalent``: Trivial Compiler Equivalence (Papadakis et al., ICSE 2015): the mutant's build
  output is byte-identical to the post-fix build's (each side's own store path replaced by one
  placeholder), so the compiler made the same program; for Python, where the installed files are
  sources, a mutated file whose AST equals the patched file's (only layout or comments differ)
  is equivalent the same way. Dropped: no reproducer can kill a program identical to the fix.
* ``not-code``: a mutated Python file differs from the patched one only in bare string
  statements (docstrings). Dropped: mutants are made only in code.
* ``run``: anything else; the reproducer runs against it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

IMPORT_TIMEOUT = 30

PLACEHOLDER = b"/nix/store/00000000000000000000000000000000-trace-self"
# the compile log trace's recorder adds to the post-fix build (templates/verify/cc-record): not
# the program, and the mutant's build is not recorded
RECORD = os.path.join("nix-support", "trace-cc.log")


def _files(root: str) -> dict[str, str]:
    """relative path -> absolute path of every file and symlink under root."""
    out: dict[str, str] = {}
    for base, dirs, names in os.walk(root):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            full = os.path.join(base, name)
            out[os.path.relpath(full, root)] = full
    return out


def _content(path: str, own: bytes) -> bytes:
    if os.path.islink(path):
        data = b"->" + os.readlink(path).encode("utf-8", "surrogateescape")
    else:
        with open(path, "rb") as fh:
            data = fh.read()
    return data.replace(own, PLACEHOLDER)


def tree_diff(mutant: str, post: str) -> list[str]:
    """Relative paths that differ between two build outputs (each side's own store path
    replaced by the same placeholder); [] means byte-identical."""
    mutant, post = os.path.realpath(mutant), os.path.realpath(post)
    a, b = _files(mutant), _files(post)
    b.pop(RECORD, None)
    own_a, own_b = mutant.encode(), post.encode()
    differ = sorted(set(a) ^ set(b))
    for rel in sorted(set(a) & set(b)):
        if _content(a[rel], own_a) != _content(b[rel], own_b):
            differ.append(rel)
    return sorted(differ)


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read()


class _NoDocstrings(ast.NodeTransformer):
    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return ast.Expr(value=ast.Constant(value="<string statement>"))
        return self.generic_visit(node)


def python_check(mutated: str, patched: str, name: str) -> tuple[str, str] | None:
    """(status, why) for one mutated Python source against the patched one; None: code differs."""
    try:
        compile(mutated, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        return "stillborn", f"{name}: does not compile ({type(exc).__name__}, line {line})"
    try:
        tree_m, tree_p = ast.parse(mutated), ast.parse(patched)
    except (SyntaxError, ValueError):
        return None  # the patched file itself does not parse here: judge by running
    if ast.dump(tree_m) == ast.dump(tree_p):
        return "equivalent", f"{name}: same AST as the patched file"
    strip = _NoDocstrings()
    if ast.dump(strip.visit(tree_m)) == ast.dump(strip.visit(tree_p)):
        return "not-code", f"{name}: only a docstring or bare string differs"
    return None


def module_of(rel: str) -> tuple[str, str] | None:
    """(site directory, module name) of an installed Python file: `lib/python3.11/site-packages/
    pkg/x.py` -> (`lib/python3.11/site-packages`, `pkg.x`); also `lib/python/...`."""
    parts = rel.split("/")
    for k, part in enumerate(parts[:-1]):
        if part == "site-packages" or (part == "python" and k > 0 and parts[k - 1] == "lib"):
            names = parts[k + 1 :]
            names[-1] = names[-1][: -len(".py")]
            if names[-1] == "__init__":
                names.pop()
            if names and all(n.isidentifier() for n in names):
                return "/".join(parts[: k + 1]), ".".join(names)
    return None


def imports(root: str, rel: str) -> tuple[bool, str]:
    """Does the module of installed file `rel` import, alone, from build `root`?"""
    where = module_of(rel)
    if where is None:
        return True, ""
    site, name = where
    code = (
        "import importlib, sys; sys.path.insert(0, sys.argv[1]); "
        "importlib.import_module(sys.argv[2])"
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-B", "-c", code, os.path.join(root, site), name],
            capture_output=True,
            timeout=IMPORT_TIMEOUT,
            check=False,
            cwd=os.environ.get("TMPDIR", "/tmp"),
        )
    except subprocess.TimeoutExpired:
        return True, ""  # a slow import is the run's business
    last = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    return proc.returncode == 0, last[0][:200]


def _changed_lines(mutated: str, patched: str) -> list[int]:
    a, b = mutated.split("\n"), patched.split("\n")
    if len(a) != len(b):
        return []
    return [k + 1 for k, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]


def check_mutant(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: target (the mutant's wrapped build), post (the post-fix build), mutant (the
    directory with mutant.json). Returns {status, why, differs, landed}."""
    with open(os.path.join(cfg["mutant"], "mutant.json"), encoding="utf-8") as fh:
        meta = json.load(fh)
    if meta.get("id") is None:
        return {"status": "none", "why": "placeholder: the patch has no mutants"}
    target = cfg["target"]
    marker = os.path.join(target, ".trace-build-failed")
    if os.path.exists(marker):
        rc = _read(marker).strip()
        return {"status": "stillborn", "why": f"the mutant does not build (exit {rc})"}
    differs = tree_diff(target, cfg["post"])
    if not differs:
        why = "build output byte-identical to the post-fix build (TCE)"
        return {"status": "equivalent", "why": why, "differs": []}
    result: dict[str, Any] = {"status": "run", "why": "", "differs": differs[:50]}
    sources = [d for d in differs if d.endswith(".py")]
    if sources and all(d.endswith((".py", ".pyc")) or "__pycache__" in d for d in differs):
        verdicts: list[tuple[str, str] | None] = []
        landed: list[dict[str, Any]] = []
        for rel in sources:
            m_path, p_path = os.path.join(target, rel), os.path.join(cfg["post"], rel)
            if not os.path.isfile(m_path) or not os.path.isfile(p_path):
                verdicts.append(None)
                continue
            mutated, patched = _read(m_path), _read(p_path)
            verdicts.append(python_check(mutated, patched, rel))
            landed += [{"file": rel, "line": n} for n in _changed_lines(mutated, patched)]
        result["landed"] = landed
        for v in verdicts:
            if v is not None and v[0] == "stillborn":
                return {**result, "status": v[0], "why": v[1]}
        for rel, v in zip(sources, verdicts, strict=True):
            if v is not None:
                continue
            ok, why = imports(target, rel)
            if not ok and imports(cfg["post"], rel)[0]:
                return {**result, "status": "stillborn", "why": f"{rel}: does not import ({why})"}
        if all(v is not None for v in verdicts):
            statuses = {v[0] for v in verdicts if v is not None}
            status = "not-code" if "not-code" in statuses else "equivalent"
            why = "; ".join(v[1] for v in verdicts if v is not None)
            return {**result, "status": status, "why": why}
    return result
