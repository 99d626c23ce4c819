"""The one jinja2 environment of the HTML pages: autoescape on for every template, strict undefined.

Every value a page prints comes from a bundle, a gate record or a pipeline file, so all of it is
HTML-escaped by jinja2; nothing is marked safe except the page's own inline script and CSS, which
are files under `templates/report/` (read here, never from a bundle). Each page carries a Content
Security Policy that allows exactly that script (by its sha256) and nothing from the network, so
even markup that escaped escaping could neither run nor load anything.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engine.files import write_atomic
from engine.paths import data_dir

TEMPLATE_DIR = Path("templates") / "report"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
MACHINE_PATH = re.compile(
    r"(?<![\w.~<>-])/(?:tmp|home|root|work|Users|srv|mnt|var/tmp|run/user)/[^\s\"'<>]*?"
    r"([^/\s\"'<>:]+)(?=[\s\"'<>,;:)\]]|$)"
)


def template_dir() -> Path:
    return data_dir() / TEMPLATE_DIR


def _asset(name: str) -> str:
    return (template_dir() / name).read_text(encoding="utf-8")


def csp(script: str) -> str:
    """No network at all: inline styles, images only as data: URIs, only this one script."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    scripts = f"'sha256-{digest}'" if script else "'none'"
    return (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
        f"script-src {scripts}; base-uri 'none'; form-action 'none'"
    )


def _short(value: object) -> str:
    text = str(value)
    return text[:16] + "…" if len(text) > 20 else text


def _anchor(value: object) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(value))


def _css_token(value: object) -> str:
    return re.sub(r"[^a-z0-9-]", "", str(value).lower())[:32]


def _is_web_url(value: object) -> bool:
    """Only http(s) URLs become links: never javascript:, data: or anything else."""
    return isinstance(value, str) and re.fullmatch(r"https?://\S+", value) is not None


def _all_mappings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(x, Mapping) for x in value)


def _columns(rows: list[Mapping[str, object]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for k in row:
            seen.setdefault(str(k), None)
    return list(seen)


def _join(value: object, sep: str = "") -> str:
    """jinja's join, for any value a forged record may hold (a number where a list belongs)."""
    if isinstance(value, list | tuple):
        return sep.join(str(x) for x in value)
    return "" if value is None else str(value)


def _tojson_text(value: object) -> str:
    return json.dumps(value, indent=1, sort_keys=True, default=str)


def _unix_time(value: object) -> str:
    try:
        return dt.datetime.fromtimestamp(int(str(value)), dt.UTC).isoformat()
    except (ValueError, OverflowError, OSError):
        return str(value)


STATUS_MARKS = {
    "built": "✓ ",
    "cached": "✓ ",
    "reused": "✓ ",
    "substituted": "✓ ",
    "recorded": "✓ ",
    "failed": "✗ ",
    "missing": "✗ ",
    "nondeterministic": "✗ ",
    "skipped": "– ",
}


def _status_mark(value: object) -> str:
    return STATUS_MARKS.get(str(value), "")


FILTERS: dict[str, Callable[..., object]] = {
    "join": _join,
    "short": _short,
    "anchor": _anchor,
    "css_token": _css_token,
    "is_web_url": _is_web_url,
    "all_mappings": _all_mappings,
    "columns": _columns,
    "tojson_text": _tojson_text,
    "unix_time": _unix_time,
    "status_mark": _status_mark,
}


def visible(text: str) -> str:
    """Control characters as their Unicode control pictures (NUL as ␀, ESC as ␛, DEL as ␡), other
    C1 and format characters as ⟨U+XXXX⟩: what a target wrote is shown, never swallowed."""
    return CONTROL.sub(_picture, text)


def _picture(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    if c < 0x20:
        return chr(0x2400 + c)
    return "\u2421" if c == 0x7F else f"⟨U+{c:04X}⟩"


def unmachine(text: str, fork_root: str = "") -> str:
    """No absolute path of the machine that ran verify: the fork's root reads `<fork>`, another
    path under a home, temp or work directory `<machine>/…/NAME`. Store paths stay."""
    if fork_root:
        text = text.replace(fork_root.rstrip("/") + "/", "<fork>/")
    return MACHINE_PATH.sub(lambda m: "<machine>/…/" + m.group(1), text)


def finalizer(fork_root: str) -> Callable[[object], object]:
    from markupsafe import Markup

    def finalize(value: object) -> object:
        if isinstance(value, str) and not isinstance(value, Markup):
            return visible(unmachine(value, fork_root))
        return value

    return finalize


def render_page(
    template: str, *, script: str | None = None, fork_root: str = "", **context: Any
) -> str:
    """Render one self-contained page. `script`: the name of an inline JS asset (or none).
    Every printed string goes through `visible` and `unmachine` (jinja's finalize)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=finalizer(fork_root),
    )
    env.filters.update(FILTERS)
    js = _asset(script) if script else ""
    return env.get_template(template).render(
        css=_asset("style.css"),
        script_text=js,
        content_security_policy=csp(js),
        **context,
    )


def write_page(path: Path, html: str) -> Path:
    """Write atomically: a reader never sees half a page."""
    write_atomic(path, html, mode=0o644)  # a page to share, like any written report
    return path
