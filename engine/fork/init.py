"""`trace init`: set a nixpkgs fork up for `nix run .#verify` (also `nix run <trace>#init`).

At the fork's root (a git work tree, usually with its own flake.nix) it:

1. copies the fork template's `trace/` folder (candidates/, steps.toml, policy/, templates/),
   keeping every file the fork already has;
2. writes flake.nix from the template when there is none, or adds the two `trace` parts to the
   existing one: `inputs.trace.url = "<URL>";` and the outputs wrapped in `trace.lib.addApps`,
   which adds `apps.<system>.verify` and `apps.<system>.trace`. The edit is checked with
   `nix-instantiate --parse`; when the file's shape does not allow it (outputs not the last
   attribute), nothing is changed and the exact lines to add are printed (exit 1);
3. adds `/.trace/` (trace's state and bundles) to .gitignore, and the CI workflow
   .github/workflows/trace.yml (a GitHub Actions matrix of `trace fork --shard I/N` jobs sharing
   a binary cache, then one `trace fork --merge` job) unless the fork has a file of that name;
4. stages everything (`git add`, real entries, not intent-to-add), runs `nix flake lock` and
   stages flake.lock, so the first `nix run .#verify` after a commit finds a clean tree.

Run again at any time: every step is skipped when already done.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InputError, TraceError, UsageError
from engine.fork.git import git_root, run_git

TEMPLATE = "nix/templates/fork"
PLACEHOLDER = "github:OWNER/trace"
IGNORE = "/.trace/"
WORKFLOWS = ".github/workflows"  # the template's CI workflow (docs/scale.md)
NIX_DEADLINE = 600.0
OUTPUTS = re.compile(r"^(?P<indent>[ \t]*)outputs[ \t]*=", re.M)
# the file's end after the outputs' `;`: the closing brace, blank lines and comments only
TAIL = re.compile(r";(?:\s|#[^\n]*)*\}(?:\s|#[^\n]*)*\Z")


def template_dir() -> Path:
    from engine.paths import data_dir

    path = data_dir() / TEMPLATE
    if not (path / "flake.nix").is_file():
        raise TraceError(f"trace's fork template is missing: {path}")
    return path


def check_url(url: str | None) -> str:
    if url is None:
        raise UsageError(
            "no --trace-url given: the fork's flake.nix needs to know where trace comes from",
            hint="pass --trace-url URL, the flake reference you run trace from (e.g. "
            "`nix run github:OWNER/trace#init -- --trace-url github:OWNER/trace`, or a "
            "`path:/abs/checkout`)",
        )
    if re.search(r'["\\\s]|\$\{', url):
        raise UsageError(
            f"--trace-url {url!r} is not a flake reference",
            hint="use e.g. github:OWNER/trace, git+https://…, or path:/abs/checkout",
        )
    if ":" not in url and Path(url).is_dir():
        return f"path:{Path(url).resolve()}"
    return url


def addapps_args(config: str, inherit: str = "inherit (inputs) self;") -> str:
    extra = "" if config == "trace" else f" config = {json.dumps(config)};"
    return f"{{ {inherit}{extra} }}"


def flake_lines(url: str, config: str) -> str:
    """What an existing flake.nix needs, as the user should add it by hand."""
    return (
        "  # trace: where you get trace from\n"
        f'  inputs.trace.url = "{url}";\n'
        "\n"
        "  # trace: the fork's outputs, plus apps.<system>.verify and apps.<system>.trace\n"
        f"  outputs = {{ trace, ... }}@inputs: trace.lib.addApps {addapps_args(config)} ((\n"
        "    <your outputs function, as it is>\n"
        '  ) (builtins.removeAttrs inputs [ "trace" ]));\n'
    )


def edit_flake(text: str, url: str, config: str) -> str | None:
    """The existing flake.nix with the trace input and its outputs wrapped, or None when its
    shape does not allow a safe edit (the caller then prints `flake_lines`)."""
    found = list(OUTPUTS.finditer(text))
    tail = TAIL.search(text)
    if len(found) != 1 or tail is None or tail.start() < found[0].end():
        return None
    m = found[0]
    indent = m.group("indent")
    head = (
        f"{indent}# trace: where you get trace from\n"
        f'{indent}inputs.trace.url = "{url}";\n'
        "\n"
        f"{indent}# trace: the outputs below, plus apps.<system>.verify and apps.<system>.trace\n"
        f"{indent}outputs = {{ trace, ... }}@inputs: trace.lib.addApps {addapps_args(config)} (("
    )
    body = text[m.end() : tail.start()]
    close = f'\n{indent}) (builtins.removeAttrs inputs [ "trace" ]));'
    return text[: m.start()] + head + body + close + text[tail.start() + 1 :]


def _nix(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            list(args), cwd=root, capture_output=True, text=True, timeout=NIX_DEADLINE, check=False
        )
    except FileNotFoundError:
        raise UsageError(
            f"{args[0]} is not on PATH",
            hint="run `trace init` (or `nix run <trace>#init`) where Nix is installed",
        ) from None
    except subprocess.TimeoutExpired:
        raise TraceError(f"{' '.join(args[:3])} took longer than {NIX_DEADLINE:.0f} s") from None


def parses(root: Path, text: str) -> bool:
    return _nix(root, "nix-instantiate", "--parse", "-E", text).returncode == 0


def has_trace_input(root: Path, flake: Path) -> bool:
    expr = f'builtins.hasAttr "trace" ((import {flake}).inputs or {{ }})'
    proc = _nix(root, "nix-instantiate", "--eval", "--json", "-E", expr)
    if proc.returncode != 0:
        raise InputError(
            f"cannot evaluate {flake}: {proc.stderr.strip()[-600:]}",
            file=flake,
            hint="fix the flake so `nix flake show` works, then run `trace init` (or "
            "`nix run <trace>#init`) again",
        )
    return bool(json.loads(proc.stdout))


def copy_template(src: Path, dest: Path, root: Path) -> tuple[list[str], list[str]]:
    """Copy every template file absent from `dest`; (added, kept) paths relative to the root."""
    added: list[str] = []
    kept: list[str] = []
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        target = dest / f.relative_to(src)
        rel = target.relative_to(root).as_posix()
        if target.exists():
            kept.append(rel)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
        added.append(rel)
    return added, kept


def ensure_ignored(root: Path) -> bool:
    """Add /.trace/ to .gitignore unless git already ignores it; True when added."""
    if run_git(root, "check-ignore", "-q", ".trace/state.db").returncode == 0:
        return False
    ignore = root / ".gitignore"
    text = ignore.read_text(encoding="utf-8") if ignore.is_file() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    ignore.write_text(text + "# trace's state and evidence bundles (trace init)\n" + IGNORE + "\n")
    return True


def stage(root: Path, paths: list[str]) -> None:
    present = [p for p in paths if (root / p).exists()]
    proc = run_git(root, "add", "--", *present)
    if proc.returncode != 0:
        raise TraceError(f"git add failed in {root}: {proc.stderr.strip()}")


@dataclass(frozen=True)
class Initialized:
    """What `trace init` did (`say`, in order), and the lines to add to flake.nix by hand when it
    did not edit it (None: edited, written or already there)."""

    say: list[str]
    lines: str | None
    config: str


def init_fork(
    fork: Path | None = None,
    *,
    config: str = "trace",
    trace_url: str | None = None,
    print_lines: bool = False,
    lock: bool = True,
    override_inputs: Sequence[tuple[str, str]] = (),
) -> Initialized:
    """Set the fork (default: the current directory's git work tree) up for `nix run .#verify`.
    `print_lines`: never edit an existing flake.nix; `override_inputs`: passed to
    `nix flake lock` as `--override-input INPUT URL`."""
    root = git_root((fork or Path.cwd()).resolve())
    template = template_dir()
    if Path(config).is_absolute() or ".." in Path(config).parts:
        raise UsageError(f"--config {config!r} must be a folder name inside the fork")
    flake = root / "flake.nix"
    # decide (and check the URL) before anything is written
    state = "absent" if not flake.exists() else "done" if has_trace_input(root, flake) else "edit"
    url = check_url(trace_url) if state != "done" else ""
    say: list[str] = []
    added, kept = copy_template(template / "trace", root / config, root)
    # the CI workflow: a job matrix over `trace fork --shard`, a shared cache, one merge job
    ci_added, ci_kept = copy_template(template / WORKFLOWS, root / WORKFLOWS, root)
    added, kept = added + ci_added, kept + ci_kept
    say += [f"added {p}" for p in added] + [f"kept {p} (already there)" for p in kept]
    lines: str | None = None
    if state == "absent":
        text = (template / "flake.nix").read_text(encoding="utf-8")
        text = text.replace(f'url = "{PLACEHOLDER}";', f'url = "{url}";')
        text = text.replace(
            "trace.lib.addApps { inherit self; }",
            f"trace.lib.addApps {addapps_args(config, 'inherit self;')}",
        )
        flake.write_text(text, encoding="utf-8")
        say.append("wrote flake.nix from the fork template")
    elif state == "done":
        say.append("flake.nix already has a trace input: left as it is")
    else:
        old = flake.read_text(encoding="utf-8")
        edited = None if print_lines else edit_flake(old, url, config)
        if edited is not None and parses(root, edited):
            flake.write_text(edited, encoding="utf-8")
            say.append("added the trace input and trace.lib.addApps to flake.nix")
        else:
            lines = flake_lines(url, config)

    if ensure_ignored(root):
        say.append(f"added {IGNORE} to .gitignore")
    staged = ["flake.nix", ".gitignore", f"{config}/", *ci_added]
    stage(root, ["flake.nix", ".gitignore", config, *ci_added])
    if lines is None and lock:
        pairs = [x for pair in override_inputs for x in ("--override-input", *pair)]
        proc = _nix(root, "nix", "flake", "lock", *pairs)
        if proc.returncode != 0:
            raise TraceError(
                f"`nix flake lock` failed in {root}:\n{proc.stderr.strip()[-2000:]}",
                hint="check inputs.trace.url in flake.nix, then run `trace init` (or "
                "`nix run <trace>#init`) again",
            )
        stage(root, ["flake.lock"])
        staged.insert(1, "flake.lock")
        say.append("locked the flake inputs (flake.lock)")
    say.append("staged (git add): " + ", ".join(staged))
    return Initialized(say=say, lines=lines, config=config)
