"""Rendering step templates (jinja2) into Nix expressions.

Every value a template prints passes through `to_nix`, the one escaping function: strings become
double-quoted Nix strings with `\\`, `"`, `$` and control characters escaped, so no user text can
close the string or open an antiquotation; lists and attribute sets are rendered recursively.
Only values the engine itself builds (`NixExpr`) are printed verbatim.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.hashing import SKIP_NAMES
from engine.plain import Frozen

if TYPE_CHECKING:  # jinja2 is imported on first render: a no-op run never pays for it
    import jinja2


class NixExpr(Frozen):
    """A fragment of Nix code produced by the engine, printed as is (a plain class: a dataclass
    costs ~2-4M instructions to make at import, issue 30)."""

    FIELDS = ("code",)
    __slots__ = FIELDS

    def __init__(self, code: str) -> None:
        self.code = code

    def __str__(self) -> str:
        return self.code


_ESCAPES = {"\\": "\\\\", '"': '\\"', "$": "\\$", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPE_RE = re.compile(r'[\\"$\n\r\t]')
_STORE_NAME_BAD = re.compile(r"[^A-Za-z0-9+\-._?=]")


def nix_string(text: str) -> str:
    if "\0" in text:
        raise ValueError("Nix strings cannot contain NUL characters")
    return '"' + _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], text) + '"'


def to_nix(value: Any) -> str:
    """The one escaping function: any JSON-like value (or NixExpr) to a Nix expression."""
    if isinstance(value, NixExpr):
        return value.code
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value >= 0 else f"({value})"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"Nix has no representation for {value}")
        if value != 0 and abs(value) < sys.float_info.min:
            raise ValueError(f"Nix cannot read the subnormal float {value!r}")
        text = repr(value)
        mantissa, e, exponent = text.partition("e")
        if e and "." not in mantissa:  # Nix needs a decimal point before an exponent
            text = f"{mantissa}.0e{exponent}"
        return text if value >= 0 else f"({text})"
    if isinstance(value, str):
        return nix_string(value)
    if isinstance(value, Mapping):
        body = " ".join(f"{nix_string(str(k))} = {to_nix(v)};" for k, v in value.items())
        return "{ " + body + " }"
    if isinstance(value, Sequence):
        return "[ " + " ".join(f"({to_nix(v)})" for v in value) + " ]"
    raise TypeError(f"cannot render {type(value).__name__} as Nix")


def store_name(text: str) -> str:
    """A valid Nix store-path name derived from arbitrary text."""
    name = _STORE_NAME_BAD.sub("-", text).lstrip(".") or "source"
    return name[:200]


# Left out of every tree copied into the store, exactly as they are left out of its digest.
_SKIP_FILTER = (
    "filter = p: t: !(builtins.elem (baseNameOf p) [ "
    + " ".join(nix_string(n) for n in sorted(SKIP_NAMES))
    + " ]);"
)


def nix_path(abs_path: str, name: str | None = None) -> NixExpr:
    """A file or tree copied into the store by content; its store path ignores where it lives."""
    base = store_name(name or abs_path.rstrip("/").rsplit("/", 1)[-1])
    return NixExpr(
        f"(builtins.path {{ path = /. + {nix_string(abs_path)}; name = {nix_string(base)}; "
        f"{_SKIP_FILTER} }})"
    )


def attr_path(path: str) -> NixExpr:
    """`a.b.c` as a selection suffix `."a"."b"."c"`, every component quoted."""
    parts = path.split(".")
    if not path or any(p == "" for p in parts):
        raise ValueError(f"not an attribute path: {path!r}")
    return NixExpr("".join("." + nix_string(p) for p in parts))


def _finalize(value: Any) -> str:
    import jinja2

    if isinstance(value, jinja2.Undefined):
        return str(value)  # StrictUndefined raises here
    return to_nix(value)


# What the compiled code of a template depends on besides its text (engine/templatecache.py):
# change it with the options below.
ENV_OPTIONS = "finalize=to_nix;undefined=strict;keep_trailing_newline;trim_blocks;lstrip_blocks"


def make_environment() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["nix"] = lambda v: NixExpr(to_nix(v))
    env.filters["attrpath"] = attr_path
    env.filters["store_name"] = lambda v: store_name(str(v))
    return env


_ENV: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = make_environment()
    return _ENV


_COMPILED: dict[str, jinja2.Template] = {}


def compile_template(text: str, name: str) -> jinja2.Template:
    """Compile once per distinct text (templates are content-addressed, so text is the key).

    Raises jinja2.TemplateSyntaxError (with `lineno`) for a template that does not compile.
    """
    tmpl = _COMPILED.get(text)
    if tmpl is None:
        tmpl = _from_cache(text, name)
        tmpl.name = name
        _COMPILED[text] = tmpl
    return tmpl


def _from_cache(text: str, name: str) -> jinja2.Template:
    """The template from its code compiled by an earlier process (engine/templatecache.py), or
    compiled now (and kept for the next)."""
    import jinja2

    from engine import templatecache

    env = environment()
    key = templatecache.name(text, name, jinja2.__version__, ENV_OPTIONS)
    code = templatecache.load(key)
    if code is None:
        code = env.compile(text)  # what from_string compiles; raises TemplateSyntaxError
        templatecache.store(key, code)
    return env.template_class.from_code(env, code, env.make_globals(None))


def render(text: str, name: str, context: Mapping[str, Any]) -> str:
    return compile_template(text, name).render(**context)
