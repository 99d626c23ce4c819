"""The patch as the variants gate's plan reads it (variant_gate.py `write_plan`): the full text
of the files it patches (`patched_sources`), the integer constants its added lines spell
(`patch_constants`) and the letters and digits they spell as characters (`patch_chars`), which
the variant generator (variants.py) puts into the PoC's inputs.
"""

from __future__ import annotations

import os


def patched_sources(patches: list[str], src: str | None) -> list[str]:
    """The patch texts, and the full text of each patched file found in the package's source
    (a directory; a tarball source gives only the patches' own lines)."""
    from .diff import parse_series

    texts = []
    for p in patches:
        with open(p, encoding="utf-8", errors="surrogateescape") as fh:
            texts.append(fh.read())
    out = list(texts)
    if src and os.path.isdir(src):
        for f in parse_series(texts).files:
            rel = f.old_path or f.new_path
            if not rel:
                continue
            parts = rel.split("/")
            for k in range(len(parts)):  # `a/b.c` may be `b.c` in an unpacked source
                path = os.path.join(src, *parts[k:])
                if os.path.isfile(path):
                    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
                        out.append(fh.read())
                    break
    return out


def _added_lines(patches: list[str]) -> list[str]:
    from .diff import parse_series

    texts = []
    for p in patches:
        with open(p, encoding="utf-8", errors="surrogateescape") as fh:
            texts.append(fh.read())
    return [ln.text for f in parse_series(texts).files for ln in f.added]


def patch_constants(patches: list[str]) -> list[int]:
    """The integer constants the patch's added lines spell (in code or as a numeric string
    literal such as `"-45"`), in order, once each."""
    from .pocvalues import literals_in

    seen: dict[int, None] = {}
    for text in _added_lines(patches):
        for v in sorted(literals_in(text)):
            seen.setdefault(v, None)
    return list(seen)


def patch_chars(patches: list[str]) -> frozenset[int]:
    """The letters and digits the patch's added lines spell as characters (`'A'`, `0x41`), less
    those the unpatched code around them already spells (a context or removed line of the same
    file: the `'0'` and `'9'` of a digit test the fix corrects are no fingerprint). Punctuation
    is left out: a fix tests for a syntax character (`'='`, `'-'`) that its PoC carries."""
    from .diff import parse_series
    from .pocvalues import char_codes_in

    texts = []
    for p in patches:
        with open(p, encoding="utf-8", errors="surrogateescape") as fh:
            texts.append(fh.read())
    out: set[int] = set()
    for f in parse_series(texts).files:
        lines = [ln for h in f.hunks for ln in h.lines]
        added = {v for ln in lines if ln.kind == "+" for v in char_codes_in(ln.text)}
        out |= added - {v for ln in lines if ln.kind != "+" for v in char_codes_in(ln.text)}
    return frozenset(v for v in out if chr(v).isalnum())
