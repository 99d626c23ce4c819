"""The one generated Nix file: the steps to evaluate, rendered from their templates.

Every step is bound in `steps` through `view`, which replaces the derivation a template produced
by `import` of its own `.drv` file: Nix turns an imported store derivation into an attribute set
with `drvPath`, `outPath` (with the `!out!<drv>` context of a real output), `name`, `outputs`,
one attribute per output, `all` and `type = "derivation"`. A downstream template therefore sees
an upstream step only through that view, the same view whether the upstream step was rendered
in this file or not, which is what makes the *frontier* possible:

A clean step (its key has a result and the result's `.drv` is in the store) need not be rendered
again: it is bound directly to `import /nix/store/<its>.drv`. Only the dirty steps and the
upstream steps whose `.drv` is gone are rendered, so one changed sink of a 1000-step graph
renders and evaluates one template, not its whole upstream closure. The `.drv` paths are the
ones a from-scratch evaluation gives (the same `view`, applied to the same derivation): the
engine's tests and the bench assert it. A from-scratch evaluation (`known` empty) is what the
trust boundary (engine/verify/trusted.py) and replays use.

The file's shape: the sandbox scope (when the pipeline has one), then one `let` binding `pkgs`,
`view`, `tracePaths` (every file or tree the rendered templates copy into the store, once: class
Paths) and `steps`; it evaluates to the list of the targets' derivations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine import hostpaths
from engine.errors import InputError
from engine.graphtypes import Graph, InputRef, Step
from engine.render import NixExpr, nix_path, nix_string, render

# An upstream step, rendered here or not, as downstream templates see it: Nix's own reading of
# its .drv. A value that is no derivation passes through (Nix then says what is wrong with it).
VIEW = "view = d: if d ? drvPath then import d.drvPath else d;"


def sandbox_scope(identity: str) -> list[str]:
    """Lines that make every derivation evaluated from here on carry the sandbox's identity
    (engine/hostpaths.py): `derivation` (and `builtins.derivation`) add the attribute, and
    `import` is `scopedImport` of the same scope, so the package set, trace's own Nix files and
    every file they import (transitively) see those names too. A `.drv` is imported as ever
    (Nix reads an imported store derivation before it looks at the scope)."""
    attr = f"{{ {hostpaths.ATTRIBUTE} = {nix_string(identity)}; }}"
    return [
        "let",
        "  traceSandbox = let",
        "    b = builtins;",
        "    scope = {",
        f"      derivation = attrs: b.derivation (attrs // {attr});",
        "      import = path: b.scopedImport scope path;",
        "      builtins = b // { inherit (scope) derivation import; };",
        "    };",
        "  in scope;",
        "in",
    ]


def _sandbox_bindings() -> list[str]:
    return ["  inherit (traceSandbox) builtins derivation import;"]


class Expression:
    """The Nix expression of a build: its text, and which step each line of it belongs to
    (`owner`: line -> the step whose rendered template it belongs to), the steps rendered from
    their template and step -> the .drv imported. A plain class: a dataclass costs ~2-4M
    instructions to make at import (issue 30)."""

    __slots__ = ("owner", "referenced", "rendered", "text")

    def __init__(
        self,
        text: str,
        owner: dict[int, str],
        rendered: list[str] | None = None,
        referenced: dict[str, str] | None = None,
    ) -> None:
        self.text, self.owner = text, owner
        self.rendered: list[str] = [] if rendered is None else rendered
        self.referenced: dict[str, str] = {} if referenced is None else referenced


# The one name the copied inputs are bound under in the file's top `let` (class Paths).
PATHS = "tracePaths"


class Paths:
    """The files and trees one build's rendered templates copy into the store, each bound once
    in the generated file's top `let` (`tracePaths.p<n> = <render.nix_path>;`) and printed as a
    reference to that binding. Nix evaluates every `builtins.path` occurrence in the text anew
    (it walks the tree and calls the filter per file, then hashes it), and the verify graph
    prints the same few inputs over a hundred times (issue 30). The reference is parenthesized,
    as `nix_path`'s expression is, so it reads the same wherever a template prints it; the
    store paths, and so the .drv paths, are those of the expressions it stands for. Only the
    rendered steps' inputs are bound: an imported step's are not in the file at all."""

    __slots__ = ("names",)

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # absolute path -> its binding's name, in first use

    def ref(self, abs_path: str) -> NixExpr:
        name = self.names.get(abs_path)
        if name is None:
            name = self.names[abs_path] = f"p{len(self.names)}"
        return NixExpr(f"({PATHS}.{name})")

    def bindings(self) -> list[str]:
        """The lines of the top `let` binding every path referenced (none: no lines)."""
        if not self.names:
            return []
        body = [f"    {name} = {nix_path(path)};" for path, name in self.names.items()]
        return [f"  {PATHS} = {{", *body, "  };"]


def context(graph: Graph, step: Step, keys: Mapping[str, str], paths: Paths) -> dict[str, Any]:
    """The jinja context of one step's template (its copied inputs: references into `paths`)."""

    def ref(sid: str) -> NixExpr:
        return NixExpr(f"steps.{nix_string(sid)}")

    params: dict[str, Any] = {}
    for name, value in step.params.items():
        if isinstance(value, InputRef):
            params[name] = paths.ref(str(value.path))
        elif isinstance(value, list) and value and isinstance(value[0], InputRef):
            params[name] = [paths.ref(str(v.path)) for v in value]
        else:
            params[name] = value
    needs: dict[str, Any] = {}
    for base, ids in step.needs_base.items():
        repeated = graph.steps[ids[0]].repeat_index is not None
        needs[base] = [ref(i) for i in ids] if repeated else ref(ids[0])
    return {
        "params": params,
        "inputs": {k: paths.ref(str(v.path)) for k, v in step.inputs.items()},
        "needs": needs,
        "step": {"id": step.id, "key": keys[step.id], "base_id": step.base_id},
        "repeat_index": step.repeat_index,
    }


def _usable(drv: str, out: str) -> bool:
    """The recorded .drv is in the store and is the derivation of the recorded output."""
    from engine.errors import NixError
    from engine.nix import output_of

    try:
        return output_of(drv) == out
    except (OSError, NixError):
        return False


def frontier(
    graph: Graph, targets: list[str], known: Mapping[str, tuple[str, str]]
) -> tuple[list[str], dict[str, str]]:
    """(steps to render, in graph order; step -> .drv to import instead of rendering).

    Walks up from the targets; a step that is not a target and whose `known` (.drv, output) pair
    is usable is imported and the walk stops there; any other step is rendered and its needs
    walked (a .drv deleted from the store, or a record naming another derivation's output, costs
    a render, never a wrong derivation)."""
    wanted = set(targets)
    seen: set[str] = set()
    imported: dict[str, str] = {}
    stack = list(targets)
    while stack:
        sid = stack.pop()
        if sid in seen:
            continue
        seen.add(sid)
        pair = known.get(sid) if sid not in wanted else None
        if pair is not None and _usable(*pair):
            imported[sid] = pair[0]
            continue
        stack.extend(graph.steps[sid].needs)
    render_ids = [s for s in graph.order if s in seen and s not in imported]
    return render_ids, {s: imported[s] for s in graph.order if s in imported}


def build(
    graph: Graph,
    keys: Mapping[str, str],
    targets: list[str],
    known: Mapping[str, tuple[str, str]] | None = None,
    *,
    plain: bool = False,
) -> Expression:
    """One Nix file evaluating to the list of target derivations.

    `known`: step -> (.drv, output) of the step's current key (clean steps): imported instead
    of rendered. Without it every step of the targets' closure is rendered (from scratch).
    `plain`: no `view`, steps bound to their templates' values as a Nix user would write them
    (the bench's raw-Nix side; the same .drv paths for templates that use upstream steps only
    as derivations)."""
    render_ids, imported = frontier(graph, targets, known or {})
    paths = Paths()
    bodies = [(sid, _render_step(graph, graph.steps[sid], keys, paths)) for sid in render_ids]
    if graph.package_set is not None:
        pkgs = f"import (/. + {nix_string(str(graph.package_set.path))}) {{ }}"
    else:
        pkgs = 'throw "this pipeline declares no [nix] package_set"'
    lines = ["# generated by trace; do not edit"]
    identity = graph.nix.sandbox_identity
    if identity is not None:
        lines += sandbox_scope(identity)
    lines += ["let", *(_sandbox_bindings() if identity else []), f"  pkgs = {pkgs};", f"  {VIEW}"]
    lines += paths.bindings()
    lines.append("  steps = {")
    for sid, drv in imported.items():
        lines.append(f"    {nix_string(sid)} = import (/. + {nix_string(drv)});")
    owner: dict[int, str] = {}
    for sid, body in bodies:
        start = len(lines) + 1
        lines.append(f"    {nix_string(sid)} = {'(' if plain else 'view ('}")
        # The body goes in byte for byte: split on "\n" only (as Nix counts lines), never
        # re-indented (str.splitlines() would also break at U+2028, \v, \x1c, \x85 ... inside a
        # rendered string and so change a value's bytes).
        lines.extend(body.rstrip("\n").split("\n"))
        lines.append("    );")
        for n in range(start, len(lines) + 1):
            owner[n] = sid
    lines.append("  };")
    lines.append("in [")
    lines.extend(f"  steps.{nix_string(t)}" for t in targets)
    lines.append("]")
    return Expression("\n".join(lines) + "\n", owner, render_ids, imported)


def _render_step(graph: Graph, step: Step, keys: Mapping[str, str], paths: Paths) -> str:
    kind = graph.kinds[step.kind]
    try:
        ctx = context(graph, step, keys, paths)
        return render(kind.template_text, str(kind.template_path), ctx)
    except Exception as exc:  # jinja2: syntax errors, undefined names, filters, types
        what = (
            "does not compile"
            if type(exc).__name__ == "TemplateSyntaxError"
            else f"does not render for step '{step.id}'"
        )
        raise InputError(
            f"template {what}: {getattr(exc, 'message', None) or exc}",
            file=kind.template_path,
            line=getattr(exc, "lineno", None) or _template_line(exc),
            key=f"steps.{step.base_id}",
            hint=f"fix the template or the step's params (step declared in {step.source})",
        ) from None


def _template_line(exc: BaseException) -> int | None:
    """The template line a jinja2 runtime error happened on (jinja maps its frames to it)."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
