"""Blame an evaluation failure on the step (and template line) that caused it.

`nix-instantiate` evaluates one generated file holding every dirty step. When its error has a
position in that file, the line says which step (and which line of the step's rendered template).
When it has none (a `throw` or missing attribute inside the package set, say), the dirty steps are
bisected: the shortest prefix of them (in graph order, so a step's upstream comes first) that
still fails ends with the step to blame. Either way the error names the step's file and line and
its template, never only the generated `.trace/build/<hash>.nix`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from engine.errors import InputError, NixError
from engine.graphtypes import Graph

# A failing evaluation of some prefix: (rc, stderr).
Evaluate = Callable[[list[str]], tuple[int, str]]

_OPTION = re.compile(r"(configuration setting|unknown setting|option) '([^']+)'", re.I)


def _tail(err: str, n: int = 12) -> str:
    from engine.nixreport import printable

    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return "\n    ".join(printable(ln) for ln in lines[-n:]) if lines else "(no output)"


def nix_failure(
    rc: int, err: str, what: str, works: Callable[[], tuple[bool, str]] | None = None
) -> NixError | InputError | None:
    """An error for a failure of Nix itself (killed, a bad setting, a store it cannot open:
    `works`, Nix evaluating `1` with the same options, fails too), or None for an evaluation
    error of the graph."""
    if rc < 0:
        return NixError(
            f"{what} was killed by signal {-rc}: Nix itself failed, not a step. Nix said:\n"
            f"    {_tail(err)}",
            hint="run again; nothing was built from this evaluation",
        )
    m = _OPTION.search(err)
    if m and "error" in err and "while evaluating" not in err:
        return InputError(
            f"Nix refused the setting '{m.group(2)}':\n    {_tail(err)}",
            key="nix.options" if m.group(2) not in ("max-jobs",) else "nix.jobs",
            hint="fix [nix] options / jobs in the pipeline (or -j on the command line)",
        )
    if works is not None:
        ok, probe = works()
        if not ok:
            return NixError(
                f"{what} failed with exit status {rc}: Nix itself failed, not a step (it cannot "
                f"evaluate `1` either: its store, settings or environment). Nix said:\n"
                f"    {_tail(err if err.strip() else probe)}",
                hint="fix what Nix reports (the store it opens: NIX_REMOTE, the `store` setting, "
                "its permissions or free space) and run again",
            )
    return None


def _rendered_line(graph: Graph, sid: str, body_line: int) -> str:
    kind = graph.kinds[graph.steps[sid].kind]
    text = kind.template_text
    if "{%" in text or "{#" in text:  # blocks may move lines: give the rendered line
        return f"line {body_line} of template {kind.template_path} as rendered"
    return f"template {kind.template_path}:{body_line}"


def blame(
    graph: Graph,
    dirty: list[str],
    err: str,
    owner: dict[int, str],
    starts: dict[str, int],
    expr_file: Path,
    evaluate: Evaluate,
) -> InputError:
    """The InputError for a failed evaluation of `expr_file` (the dirty steps)."""
    sid = None
    where = ""
    for m in re.finditer(re.escape(str(expr_file)) + r":(\d+):", err):
        line = int(m.group(1))
        sid = owner.get(line)
        if sid:
            where = _rendered_line(graph, sid, line - starts[sid])
            break
    if sid is None:
        sid, err = _bisect(dirty, evaluate, err)
    msg = _tail(err)
    if sid is None:
        return InputError(
            f"the graph does not evaluate:\n    {msg}",
            file=expr_file,
            hint="check [nix] package_set and the templates",
        )
    step = graph.steps[sid]
    kind = graph.kinds[step.kind]
    return InputError(
        f"step '{sid}' does not evaluate" + (f" ({where})" if where else "") + f":\n    {msg}",
        file=step.source,
        key=f"steps.{step.base_id}",
        line=step.line,
        hint=f"check its template {kind.template_path} and params (kind '{step.kind}'); "
        f"the generated Nix is in {expr_file}",
    )


def _bisect(dirty: list[str], evaluate: Evaluate, err: str) -> tuple[str | None, str]:
    """The first dirty step whose prefix fails to evaluate (the prefix before it evaluates), and
    that failure's stderr."""
    if not dirty:
        return None, err
    lo, hi = 1, len(dirty)  # the prefix of length hi fails (the whole evaluation did)
    last_err = err
    while lo < hi:
        mid = (lo + hi) // 2
        rc, e = evaluate(dirty[:mid])
        if rc != 0:
            hi, last_err = mid, e
        else:
            lo = mid + 1
    return dirty[hi - 1], last_err


def scratch_evaluator(
    write: Callable[[list[str]], str], run: Callable[[Path], tuple[int, str]], folder: Path
) -> Evaluate:
    """Evaluate prefixes through temporary files in `folder` (removed afterwards)."""

    def evaluate(prefix: list[str]) -> tuple[int, str]:
        path = folder / f".blame.{os.getpid()}.{len(prefix)}.nix"
        path.write_text(write(prefix), encoding="utf-8")
        try:
            return run(path)
        finally:
            path.unlink(missing_ok=True)

    return evaluate
