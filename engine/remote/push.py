"""`trace push`: copy a state directory's results (outputs and their closure) to a binary cache,
signed with a Nix binary-cache key, with `nix store sign` and `nix copy`.

Which results: those of every graph's latest run in the state directory (the steps `trace plan`
would call clean), not older results the index still holds. The signature is Nix's own
(`nix-store --generate-binary-cache-key`): a machine that lists the public key in its
`trusted-public-keys` accepts the paths as if it had built them (docs/evidence.md, trust model).
With them go the determinism claims of the results whose `--check` passed (engine/remote/attest.py),
signed with the same key: such a machine takes them instead of rebuilding those steps.
"""

from __future__ import annotations

import base64
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from engine.cache import Index
from engine.errors import InputError, UsageError
from engine.machine import Machine, load_machine
from engine.nix import batches
from engine.nixreport import printable

NIX = ("--extra-experimental-features", "nix-command", "--option", "connect-timeout", "15")
TIMEOUT = 3600.0  # seconds for one nix call (a big closure to a slow cache)


@dataclass
class PushReport:
    to: str
    key_name: str
    outputs: list[str] = field(default_factory=list)  # the results' output paths
    claims: list[str] = field(default_factory=list)  # their determinism claims
    steps: int = 0


def results_to_push(index: Index) -> list[str]:
    """The output paths of every graph's latest results that are in the store, sorted."""
    rows = index.db.execute(
        "SELECT DISTINCT r.out FROM last_keys l JOIN results r ON r.key = l.key"
    ).fetchall()
    return sorted(str(out) for (out,) in rows if out and os.path.exists(out))


def claims_to_push(index: Index) -> list[str]:
    """The determinism claims (engine/remote/attest.py) of the latest results whose --check
    passed, that are in the store, sorted."""
    from engine.remote.attest import expected

    rows = index.db.execute(
        "SELECT DISTINCT r.drv, r.out FROM last_keys l JOIN results r ON r.key = l.key "
        "WHERE r.deterministic = 1"
    ).fetchall()
    want = expected({str(drv): str(out) for drv, out in rows if drv and out})
    return sorted(p for p, _ in want.values() if os.path.exists(p))


def key_name(path: Path) -> str:
    """The key's name; refuses a file that is not a Nix binary-cache secret key (exit 2)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise InputError(
            "the signing key does not exist",
            file=path,
            key="--key",
            hint="make one with `nix-store --generate-binary-cache-key NAME KEY.sec KEY.pub` and "
            "list KEY.pub in the trusted-public-keys of the machines that substitute from it",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the signing key: {exc}", file=path, key="--key") from None
    name, _, secret = text.partition(":")
    try:
        ok = bool(name) and len(base64.b64decode(secret, validate=True)) == 64
    except ValueError:
        ok = False
    if not ok:
        raise InputError(
            "not a Nix binary-cache secret key (name:base64 of 64 bytes)",
            file=path,
            key="--key",
            hint="pass the secret key file `nix-store --generate-binary-cache-key` wrote "
            "(not the .pub file)",
        )
    return name


def _nix(args: list[str], what: str, to: str) -> None:
    try:
        proc = subprocess.run(
            ["nix", *NIX, *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise UsageError("'nix' not found on PATH", hint="run scripts/setup") from None
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"{what} did not finish in {TIMEOUT:.0f} s", key="--to", hint=f"check {to}"
        ) from None
    if proc.returncode != 0:
        tail = "\n    ".join(printable(ln) for ln in proc.stderr.strip().splitlines()[-8:])
        raise UsageError(
            f"{what} failed (the cache {to} is unreachable or refused the paths). Nix said:"
            f"\n    {tail or '(no output)'}",
            key="--to",
            hint="check the cache URL, that it is reachable and writable from here",
        )


def push(
    state_dir: Path,
    *,
    to: str | None = None,
    key: Path | None = None,
    machine: Machine | None = None,
    wait: float = 0,
) -> PushReport:
    """Sign the results' closure with `key` and copy it to the cache `to` (defaults: the
    machine config's push-to and secret-key-file). Bad input exits 2 before anything is copied."""
    machine = machine if machine is not None else load_machine()
    to = to or machine.push_to
    if not to:
        raise UsageError(
            "no cache to push to",
            key="--to",
            hint="pass --to URL (file:///path, s3://bucket, ssh-ng://host) or set push-to in "
            "the machine config",
        )
    key_file = key or (Path(machine.secret_key_file) if machine.secret_key_file else None)
    if key_file is None:
        raise UsageError(
            "no signing key: trace pushes only signed paths",
            key="--key",
            hint="pass --key KEY.sec (`nix-store --generate-binary-cache-key`) or set "
            "secret-key-file in the machine config",
        )
    name = key_name(key_file)
    if not state_dir.is_dir():
        raise UsageError(
            f"{state_dir} is not a state directory",
            key="--state-dir",
            hint="run trace run/verify first, or pass the --state-dir it used",
        )
    with Index(state_dir, wait=wait) as index:
        outs = results_to_push(index)
        claims = claims_to_push(index)
        steps = len(index.db.execute("SELECT 1 FROM last_keys").fetchall())
    if not outs:
        raise UsageError(
            f"nothing to push: no result of {state_dir} is in the store",
            key="--state-dir",
            hint="run trace run/verify first (with the same --state-dir)",
        )
    for batch in batches(outs + claims):
        _nix(["store", "sign", "--key-file", str(key_file), "--recursive", *batch], "signing", to)
    for batch in batches(outs + claims):
        _nix(["copy", "--to", to, *batch], "nix copy", to)
    return PushReport(to=to, key_name=name, outputs=outs, claims=claims, steps=steps)
