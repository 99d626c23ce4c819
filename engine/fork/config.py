"""Where a fork's trace files are: the fork root, its trace folder, candidates, state."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from engine.errors import UsageError
from engine.fork.git import git_root
from engine.paths import cli

# Plain dataclasses, not pydantic: this module is imported for every `trace --help` (its parser
# is registered in engine.cli), and pydantic would add ~60 ms there. Nothing is parsed into them.


@dataclass(frozen=True)
class ForkConfig:
    """Where everything of one `trace fork` run is, all absolute."""

    root: Path  # the fork's git work tree
    package_set: Path
    config: Path  # the fork's trace folder
    candidates: Path
    steps: Path | None  # the fork's own steps (None: none)
    policy: Path | None  # the fork's policy overrides (None: none)
    state: Path
    bundles: Path
    source: Source | None = None  # the flake's own source (`nix run .#verify`), else None

    @property
    def generated(self) -> Path:
        """Where trace writes the files a verify graph is loaded from (each candidate's entry
        pipeline, the flake's package-set.nix): STATE/fork when the state directory is inside
        the package set (the default FORK/.trace), else PACKAGE_SET/.trace/fork. A bundle's
        replay record names them relative to the fork, so they stay inside it wherever
        --state-dir puts the index, results and bundles."""
        if self.state.is_relative_to(self.package_set):
            return self.state / "fork"
        return self.package_set / ".trace" / "fork"


@dataclass(frozen=True)
class Source:
    """The fork's source as Nix copied it for the flake (git-tracked files only)."""

    store_path: Path
    nar_hash: str | None
    system: str
    nix_version: str | None = None  # `nix --version` as the app passes it (None: ask once)


STORE = Path("/nix/store")


def make_source(args: argparse.Namespace) -> Source | None:
    if args.source is None:
        if args.source_nar_hash or args.system or getattr(args, "nix_version", None):
            raise UsageError(
                "--source-nar-hash, --system and --nix-version go with --source STORE_PATH"
            )
        return None
    path = Path(args.source)
    if path.parent != STORE or not path.is_dir():
        raise UsageError(
            f"--source {args.source} is not a source directory in {STORE}",
            hint="`nix run .#verify` passes the fork flake's own source (`self`); run "
            f"`{cli('fork')}` without --source to verify the work tree",
        )
    if not args.system:
        raise UsageError("--source needs --system (the system to import the package set for)")
    return Source(
        store_path=path,
        nar_hash=args.source_nar_hash,
        system=args.system,
        nix_version=getattr(args, "nix_version", None),
    )


def _inside(root: Path, value: str, what: str) -> Path:
    path = (root / value).resolve()
    if not path.is_relative_to(root):
        raise UsageError(
            f"{what} '{value}' is outside the fork {root}", hint="use a path inside it"
        )
    return path


def make_config(args: argparse.Namespace) -> ForkConfig:
    root = git_root((args.fork or Path.cwd()).resolve())
    config = _inside(root, args.config, "--config")
    candidates = _inside(root, args.candidates or f"{args.config}/candidates", "--candidates")
    if not candidates.is_dir():
        raise UsageError(
            f"no candidates folder at {candidates}",
            hint=f"put each fix candidate in {args.config}/candidates/<name>/candidate.toml "
            "(`nix run <trace>#init -- --trace-url <trace>` sets a fork up)",
        )
    steps = _inside(root, args.steps, "--steps") if args.steps else config / "steps.toml"
    if args.steps and not steps.is_file():
        raise UsageError(f"--steps file {steps} does not exist")
    policy = _inside(root, args.policy, "--policy") if args.policy else config / "policy"
    if args.policy and not policy.is_dir():
        raise UsageError(f"--policy folder {policy} does not exist")
    state = (args.state_dir or root / ".trace").resolve()
    return ForkConfig(
        root=root,
        package_set=_inside(root, args.package_set, "--package-set"),
        config=config,
        candidates=candidates,
        steps=steps if steps.is_file() else None,
        policy=policy if policy.is_dir() else None,
        state=state,
        bundles=(args.out or state / "bundles").resolve(),
        source=make_source(args) if hasattr(args, "source") else None,
    )


def candidate_name(file: Path) -> str:
    """A candidate's name in the fork: its folder (`<name>/candidate.toml`) or file stem."""
    return file.parent.name if file.name == "candidate.toml" else file.stem


def discover(cfg: ForkConfig, names: list[str]) -> list[Path]:
    """Candidate files: every `<name>/candidate.toml` and `<name>.toml`, or the named ones."""
    found: dict[str, Path] = {}
    for d in sorted(cfg.candidates.iterdir()):
        if d.is_dir() and (d / "candidate.toml").is_file():
            found[d.name] = d / "candidate.toml"
        elif d.is_file() and d.suffix == ".toml":
            found[d.stem] = d
    if not names:
        if not found:
            raise UsageError(
                f"no candidates in {cfg.candidates}",
                hint=f"add <name>/candidate.toml (see `{cli('schema candidate')}`)",
            )
        return list(found.values())
    chosen: list[Path] = []
    for name in names:
        as_path = Path(name)
        if name in found:
            chosen.append(found[name])
        elif as_path.is_file():
            chosen.append(as_path.resolve())
        else:
            raise UsageError(
                f"unknown candidate '{name}'",
                hint=f"candidates in {cfg.candidates}: {', '.join(found) or 'none'}",
            )
    return chosen
