"""`trace keygen PRIVATE`: an ECDSA P-256 key pair for offline signing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    k = sub.add_parser(
        "keygen",
        help="create an ECDSA P-256 key pair for offline signing",
        description="Write PRIVATE (mode 0600, PKCS#8 PEM; encrypted when TRACE_KEY_PASSWORD "
        "is set) and PRIVATE.pub. Existing files are never overwritten.",
    )
    k.add_argument("private", type=Path, help="private key path, e.g. keys/trace.key")
    k.set_defaults(handler=_keygen)


def _keygen(args: argparse.Namespace) -> int:
    from engine.signing.keys import keygen

    priv, pub, hint = keygen(args.private)
    print(f"private key: {priv} (mode 0600)\npublic key:  {pub}\nhint:        {hint}")
    return 0
