"""The machine's settings for binary caches and remote builders: never a pipeline's.

Where substituters, trusted keys and builders come from, in order:

1. a trace machine config, the first that exists of `$TRACE_MACHINE_CONFIG`,
   `$XDG_CONFIG_HOME/trace/machine.toml` (default `~/.config/trace/machine.toml`) and
   `/etc/trace/machine.toml`: each setting it gives replaces Nix's own;
2. otherwise the machine's Nix configuration (`/etc/nix/nix.conf`, `NIX_CONFIG` ...), as it is.

A pipeline file can set none of them (engine/graphtypes.py FORBIDDEN_OPTIONS), and whatever the
configuration says, trace passes `require-sigs = true` on every Nix call (engine/nix.py), so a
substituted path is accepted only with a signature by a key in `trusted-public-keys`. A machine
config that turns signatures off or lists a cache without a trusted key is refused (exit 2).

Lower layer: imports only engine.errors (engine/nix.py reads it); the file's pydantic model
(engine/machinefile.py) only when there is a file to read.
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

from engine.errors import InputError
from engine.loader import load
from engine.plain import Frozen

ENV_VAR = "TRACE_MACHINE_CONFIG"
SYSTEM_PATH = Path("/etc/trace/machine.toml")

_KEY = re.compile(r"^[A-Za-z0-9._+-]+:[A-Za-z0-9+/=]+$")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://\S*$")


class Machine(Frozen):
    """The machine config in force, as plain data (no config file: all unset). What each key
    means, and its validation: engine/machinefile.py MachineConfig (`trace schema
    machine`). A plain class: a dataclass costs ~2-4M instructions to make at import, on every
    trace process (issue 30)."""

    FIELDS = (
        "substituters",
        "trusted_public_keys",
        "require_sigs",
        "builders",
        "check_builders",
        "max_jobs",
        "push_to",
        "secret_key_file",
    )
    __slots__ = FIELDS

    def __init__(
        self,
        *,
        substituters: list[str] | None = None,
        trusted_public_keys: list[str] | None = None,
        require_sigs: bool | None = None,
        builders: list[str] | None = None,
        check_builders: list[str] | None = None,
        max_jobs: int | None = None,
        push_to: str | None = None,
        secret_key_file: str | None = None,
    ) -> None:
        self.substituters, self.trusted_public_keys = substituters, trusted_public_keys
        self.require_sigs, self.builders, self.check_builders = (
            require_sigs,
            builders,
            check_builders,
        )
        self.max_jobs, self.push_to, self.secret_key_file = max_jobs, push_to, secret_key_file

    def nix_options(self) -> list[tuple[str, str]]:
        """The settings this config gives, as Nix options (unset ones leave Nix's own)."""
        out: list[tuple[str, str]] = []
        if self.substituters is not None:
            out.append(("substituters", " ".join(self.substituters)))
        if self.trusted_public_keys is not None:
            out.append(("trusted-public-keys", " ".join(self.trusted_public_keys)))
        if self.builders is not None:
            out.append(("builders", " ; ".join(self.builders)))
        return out

    def check_pool(self) -> list[str]:
        """The builder specs the `--check` rebuilds of determinism checks go to ([]: here)."""
        if self.check_builders:
            return list(self.check_builders)
        return list(self.builders or []) if self.max_jobs == 0 else []


def config_path() -> Path | None:
    """The machine config in force: the first candidate that exists (None: Nix's own only)."""
    env = os.environ.get(ENV_VAR)
    if env is not None:
        return Path(env) if env else None  # set but empty: no trace machine config at all
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    for p in (Path(xdg) / "trace" / "machine.toml", SYSTEM_PATH):
        if p.is_file():
            return p
    return None


def _refuse(path: Path, key: str, message: str, hint: str) -> InputError:
    return InputError(message, file=path, key=key, hint=hint)


def _check(cfg: Machine, path: Path) -> Machine:
    if cfg.require_sigs is False:
        raise _refuse(
            path,
            "require-sigs",
            "require-sigs = false would accept unsigned cache contents as build results",
            "remove the line: trace always requires a trusted signature on substituted paths",
        )
    for i, key in enumerate(cfg.trusted_public_keys or []):
        raw = key.split(":", 1)[-1]
        try:
            ok = bool(_KEY.match(key)) and len(base64.b64decode(raw, validate=True)) == 32
        except ValueError:
            ok = False
        if not ok:
            raise _refuse(
                path,
                f"trusted-public-keys.{i + 1}",
                f"'{key}' is not a Nix binary-cache public key (name:base64 of 32 bytes)",
                "copy the .pub file that `nix-store --generate-binary-cache-key` wrote",
            )
    for i, url in enumerate(cfg.substituters or []):
        if not _URL.match(url):
            raise _refuse(
                path,
                f"substituters.{i + 1}",
                f"'{url}' is not a store URL",
                "write it as Nix does: file:///path, https://host, s3://bucket, ssh-ng://host",
            )
    if cfg.substituters and not cfg.trusted_public_keys:
        raise _refuse(
            path,
            "substituters",
            "substituters are listed without trusted-public-keys: no cached path could be "
            "checked against a key",
            "add the caches' public keys as trusted-public-keys (or remove substituters)",
        )
    for name in ("builders", "check_builders"):
        for i, spec in enumerate(getattr(cfg, name) or []):
            if not spec.strip() or ";" in spec or "\n" in spec:
                key = name.replace("_", "-")
                raise _refuse(
                    path,
                    f"{key}.{i + 1}",
                    f"'{spec}' is not one builder specification",
                    "one machine per list entry: `ssh-ng://host system key jobs speed features`",
                )
    if cfg.max_jobs == 0 and not cfg.builders:
        raise _refuse(
            path,
            "max-jobs",
            "max-jobs = 0 sends every build to the builders, but no builders are listed",
            "list the remote builders (`builders = [...]`) or allow local builds (max-jobs >= 1)",
        )
    return cfg


def load_machine(path: Path | None = None) -> Machine:
    """The machine config in force (an empty one when there is none); bad files exit 2."""
    path = path if path is not None else config_path()
    if path is None:
        return Machine()
    if not path.exists() and not path.is_symlink():
        raise InputError(
            "the machine config does not exist",
            file=path,
            hint=f"create it or unset {ENV_VAR}",
        )
    from engine.machinefile import MachineConfig

    cfg = load(
        path,
        MachineConfig,
        "machine config",
        hint="see `trace schema machine` for the keys a machine config may hold",
    )
    return _check(Machine(**cfg.model_dump()), path)
