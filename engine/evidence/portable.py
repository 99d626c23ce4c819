"""Machine-independent paths in signed payload files.

A record made on one machine names files by where they were there: the fork's checkout
(`/home/ci/work/fork/trace.toml`), trace's own data directory, a state directory. Bundled as
they are, the same fix verified in two checkouts gives two digests, and a bundle published from
CI names the runner's directories. Before a record is bundled, each path it names is rewritten
by `portable_path(path, root)`:

- a path inside the fork (`root`) becomes relative to it (`trace.toml`, `.trace/policy/x.toml`),
  the fork itself `.`;
- a path inside trace's data directory becomes `trace:<relative>` (as policy refs name them);
- a store path (`/nix/store/...`) and a relative path stay: they are the same on every machine;
- any other absolute path (a `--waivers` file in /tmp, a state directory outside the fork)
  becomes `outside-fork:<file name>`: where it was is that machine's business.

Which fields are paths: the verify result's `candidate_file` and `graph` (`portable_verify`),
and the `path` of every policy reference (`{name, version, digest, path}`) inside a decision
(`portable_refs`). Nothing else is rewritten: run and gate records are the sandbox's outputs
(`/build`, store paths), the same everywhere, and cross-checked byte for byte against outcomes/.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from engine.paths import PREFIX, data_dir

OUTSIDE = "outside-fork:"
STORE = "/nix/store/"
VERIFY_PATH_FIELDS = ("candidate_file", "graph")


def portable_path(path: str, root: Path) -> str:
    """`path` as every machine names it (see the module docstring)."""
    p = PurePosixPath(path)
    if not p.is_absolute() or path.startswith(STORE):
        return path
    # the fork first: it may lie inside the data directory (a checkout's test fixture)
    for base, prefix in ((root, ""), (root.resolve(), ""), (data_dir(), PREFIX)):
        try:
            rel = p.relative_to(str(base))
        except ValueError:
            continue
        shown = rel.as_posix()
        return prefix + shown if prefix else (shown if shown != "." else ".")
    return OUTSIDE + p.name


def portable_verify(doc: dict[str, Any], root: Path) -> dict[str, Any]:
    """A dumped VerifyResult with its file fields relative to the fork."""
    out = dict(doc)
    for key in VERIFY_PATH_FIELDS:
        if isinstance(out.get(key), str):
            out[key] = portable_path(out[key], root)
    return out


def portable_refs(value: Any, root: Path) -> Any:
    """A dumped decision with the `path` of each policy reference made portable."""
    if isinstance(value, list):
        return [portable_refs(v, root) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: portable_refs(v, root) for k, v in value.items()}
    is_ref = {"name", "version", "digest", "path"} <= out.keys()
    if is_ref and isinstance(out["path"], str):
        out["path"] = portable_path(out["path"], root)
    return out
