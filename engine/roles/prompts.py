"""Prompt templates: one jinja2 file per role with a `system` and a `prompt` block, rendered
with exactly the values its step needs (StrictUndefined: anything else is an error)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.errors import InputError


def render(template: Path, values: dict[str, Any]) -> tuple[str, str]:
    """(system, prompt) of the template, given only `values` (names: needs with '.' -> '_')."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template.parent)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    try:
        tmpl = env.get_template(template.name)
        blocks = {}
        for name in ("system", "prompt"):
            if name not in tmpl.blocks:
                raise InputError(
                    f"prompt template has no {{% block {name} %}}",
                    file=template,
                    hint="a role template defines a system block and a prompt block",
                )
            ctx = tmpl.new_context(dict(values))
            blocks[name] = "".join(tmpl.blocks[name](ctx)).strip() + "\n"
    except jinja2.TemplateSyntaxError as exc:
        msg = f"template syntax error: {exc.message}"
        raise InputError(msg, file=template, line=exc.lineno) from None
    except jinja2.UndefinedError as exc:
        raise InputError(
            f"prompt template uses a value its step does not need: {exc.message}",
            file=template,
            hint=f"the step provides only: {', '.join(sorted(values)) or 'nothing'}; add the "
            "value to the step's needs (a reviewer may not see the Patcher's context)",
        ) from None
    return blocks["system"], blocks["prompt"]


def context_name(need: str) -> str:
    return need.replace(".", "_")
