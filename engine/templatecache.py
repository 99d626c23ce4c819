"""Compiled step templates kept between processes (issue 30): jinja2's lexer and code generator
cost ~12 ms per fresh process for the one template a one-step change renders; the generated
module's code object, marshalled, loads in ~0.1 ms.

Kept under the user's state home (`trace/templates/`, beside the load cache's key), one file per
compiled template: a MAC, then the marshalled code. The MAC is an HMAC-SHA256 with a per-user
secret (engine/userkey.py) over the file's name and payload: nothing is unmarshalled (a code
object runs as code) before it checks out. The name digests everything the code depends on: the
template's text and name, jinja2's version, the interpreter's bytecode magic and the render
environment's options (`render.ENV_OPTIONS`). A missing, torn, forged or mismatched file is a
miss: the template is compiled as before and stored again, atomically (temp file and rename,
engine/files.py) and without an fsync: a file a crash loses is only a compile next time.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import marshal
from pathlib import Path
from types import CodeType

from engine import userkey
from engine.files import write_atomic

FORMAT = 1
MAC_HEX = 64


def folder() -> Path | None:
    home = userkey.state_home()
    return None if home is None else home / "trace" / "templates"


def _secret(create: bool) -> bytes | None:
    home = userkey.state_home()
    return (
        None if home is None else userkey.load(home / "trace" / "template-cache.key", create=create)
    )


def name(text: str, template_name: str, jinja_version: str, options: str) -> str:
    ident = [FORMAT, importlib.util.MAGIC_NUMBER.hex(), jinja_version, options, template_name]
    h = hashlib.sha256(json.dumps(ident).encode())
    h.update(b"\0" + text.encode())
    return h.hexdigest()


def _mac(secret: bytes, key: str, payload: bytes) -> str:
    return hmac.new(
        secret, b"trace template\0" + key.encode() + b"\0" + payload, "sha256"
    ).hexdigest()


def load(key: str) -> CodeType | None:
    """The code stored under `key`, when this user's trace wrote it; None otherwise."""
    where, secret = folder(), _secret(create=False)
    if where is None or secret is None:
        return None
    try:
        data = (where / key).read_bytes()
    except OSError:
        return None
    mac, payload = data[:MAC_HEX], data[MAC_HEX:]
    if not hmac.compare_digest(mac, _mac(secret, key, payload).encode()):
        return None
    try:
        code = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    return code if isinstance(code, CodeType) else None


def store(key: str, code: CodeType) -> None:
    """Keep `code` under `key` (best effort: a cache that cannot be written is a compile)."""
    where, secret = folder(), _secret(create=True)
    if where is None or secret is None:
        return
    payload = marshal.dumps(code)
    try:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(where / key, _mac(secret, key, payload).encode() + payload)
    except OSError:
        return
