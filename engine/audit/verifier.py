"""`verify_bundle` with the signer lock, keys and replay it is given, as one function of a bundle
directory: what `trace verify-bundle`, `trace report` and `trace land` check a bundle with.

Light at import (everything heavy is imported when a verifier is made): the command line reads
DEFAULT_IDENTITY for its help text."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.audit.checks import BundleVerdict

DEFAULT_IDENTITY = Path("policy/signing-identity.json")


def make_verifier(
    *,
    root: Path | None = None,
    identity: Path | None = None,
    keys: Sequence[Path] = (),
    trust_config: Path | None = None,
    replay: bool = False,
) -> Callable[[Path], BundleVerdict]:
    """A verifier for any bundle directory. `root`: the fork the bundle was made in (replays run
    there, its own policy files are accepted when the bundle pins their digest; default: the
    current directory for replays, no fork otherwise). `identity`: the signer lock (default:
    ROOT/policy/signing-identity.json if present, else trace's shipped one)."""
    from engine.audit.checks import ReplayFn, verify_bundle
    from engine.audit.identity import load_identity_policy
    from engine.audit.replay import replay_checks
    from engine.paths import data_dir
    from engine.signing.keys import key_hint, load_public_key

    fork = root.resolve() if root is not None else None
    where = fork or Path(".").resolve()
    lock = identity or where / DEFAULT_IDENTITY
    if identity is None and not lock.is_file():
        lock = data_dir() / DEFAULT_IDENTITY
    policy = load_identity_policy(lock)
    trusted = {key_hint(k): k for k in (load_public_key(p) for p in keys)}
    replay_fn: ReplayFn | None = None
    if replay:

        def replay_fn(statement: Any, payload: Path) -> Any:
            return replay_checks(statement, payload, root=where)

    def verify(bundle: Path) -> BundleVerdict:
        return verify_bundle(
            bundle,
            policy,
            trust_config=trust_config,
            extra_keys=trusted,
            replay=replay_fn,
            fork=fork,
        )

    return verify
