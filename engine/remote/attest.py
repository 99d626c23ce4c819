"""Determinism claims: a passed `--check`, recorded in the store so another machine can take it.

When a step's `--check` rebuild matched its output bit for bit, trace adds a claim to the store,
a text file (`builtins.toFile`) named `trace-check-<drv hash>` holding

    {"schema": "trace.check/v1", "drv": DRV, "out": OUT, "narHash": H, "deterministic": true}

(canonical JSON; H is Nix's NAR hash of OUT). `trace push` signs it with the cache key and copies
it with the outputs. A second machine that substituted OUT computes the claim's store path from
DRV, OUT and the NAR hash of the OUT it has (the path of a text file is a function of its bytes),
fetches that path from its caches and accepts the claim only if Nix's signature on it verifies
against one of the machine's `trusted-public-keys` (checked here, with `cryptography`: Nix
itself takes a content-addressed path from any cache and calls it trusted without a signature,
and anyone who can use the store can add one). An accepted claim stands in for the local
`--check` rebuild; without one (missing, unsigned, signed by another key, for other bytes) the
step is rebuilt here as before.

What that trusts: the holder of a trusted cache key, who could already supply any output,
`outcome.json` included, can also assert that an output was reproduced. No claim is ever made
for a check that failed, so a nondeterministic step is never taken from a cache as deterministic.

Lower layer: imports engine.errors, engine.nix and engine.storelock only.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engine.errors import NixError
from engine.nix import NIX_COMMAND, Nix, batches
from engine.nixreport import RealiseReport, printable
from engine.storelock import store_lock, store_of

SCHEMA = "trace.check/v1"
CLAIM_PREFIX = "claim:"  # a step's checked_on when its check was a claim taken: claim:<path>
STORE_DIR = "/nix/store"
_B32 = "0123456789abcdfghijklmnpqrsvwxyz"
_DEADLINE = 300.0


def nix_base32(data: bytes) -> str:
    """Nix's base-32 (the alphabet without e o u t, least significant bits first)."""
    n = (len(data) * 8 - 1) // 5 + 1
    out = []
    for i in range(n - 1, -1, -1):
        b = i * 5
        j, k = divmod(b, 8)
        c = data[j] >> k
        if j + 1 < len(data):
            c |= data[j + 1] << (8 - k)
        out.append(_B32[c & 0x1F])
    return "".join(out)


def text_path(name: str, text: str) -> str:
    """The store path `builtins.toFile name text` gives (no references)."""
    inner = hashlib.sha256(text.encode()).hexdigest()
    digest = hashlib.sha256(f"text:sha256:{inner}:{STORE_DIR}:{name}".encode()).digest()
    folded = bytearray(20)
    for i, byte in enumerate(digest):
        folded[i % 20] ^= byte
    return f"{STORE_DIR}/{nix_base32(bytes(folded))}-{name}"


def claim_name(drv: str) -> str:
    return "trace-check-" + os.path.basename(drv).split("-", 1)[0]


def claim_text(drv: str, out: str, nar_hash: str) -> str:
    doc = {"deterministic": True, "drv": drv, "narHash": nar_hash, "out": out, "schema": SCHEMA}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def _run(args: Sequence[str], what: str) -> str:
    try:
        proc = subprocess.run(
            list(args), capture_output=True, text=True, timeout=_DEADLINE, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise NixError(f"{what} did not finish in {_DEADLINE:.0f} s") from None
    if proc.returncode != 0:
        raise NixError(f"{what} failed: {printable(proc.stderr.strip()[-500:])}")
    return proc.stdout


def path_infos(paths: Iterable[str]) -> dict[str, dict[str, object]]:
    """`nix path-info --json --sigs` of the valid ones among `paths`."""
    infos: dict[str, dict[str, object]] = {}
    for batch in batches(sorted(set(paths))):
        try:
            proc = subprocess.run(
                ["nix", *NIX_COMMAND, "path-info", "--json", "--sigs", *batch],
                capture_output=True,
                text=True,
                timeout=_DEADLINE,
                stdin=subprocess.DEVNULL,
            )  # an invalid path makes it exit 1 but still print the valid ones
            found = json.loads(proc.stdout or "[]")
        except subprocess.TimeoutExpired:
            raise NixError(f"nix path-info did not finish in {_DEADLINE:.0f} s") from None
        except ValueError:
            raise NixError(f"nix path-info failed: {printable(proc.stderr[-500:])}") from None
        for info in found:
            if info.get("valid", True) and "narHash" in info:
                infos[str(info["path"])] = info
    return infos


def expected(pairs: dict[str, str]) -> dict[str, tuple[str, str]]:
    """drv -> (claim path, claim text) for {drv: out} whose outputs are valid here."""
    infos = path_infos(pairs.values())
    found: dict[str, tuple[str, str]] = {}
    for drv, out in pairs.items():
        if out in infos:
            text = claim_text(drv, out, str(infos[out]["narHash"]))
            found[drv] = (text_path(claim_name(drv), text), text)
    return found


def record(pairs: dict[str, str]) -> dict[str, str]:
    """Add the claims for {drv: out} (their --check passed) to the store: drv -> claim path."""
    want = expected(pairs)
    if not want:
        return {}
    items = [{"name": claim_name(d), "text": t} for d, (_, t) in sorted(want.items())]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(items, fh)
    try:
        expr = (
            "map (x: builtins.toFile x.name x.text) "
            f"(builtins.fromJSON (builtins.readFile {fh.name}))"
        )
        out = _run(
            ["nix-instantiate", "--eval", "--strict", "--json", "--read-write-mode", "-E", expr],
            "adding the determinism claims to the store",
        )
    finally:
        os.unlink(fh.name)
    made = set(json.loads(out))
    return {d: p for d, (p, _) in want.items() if p in made}


def _verifies(info: dict[str, object], keys: dict[str, Ed25519PublicKey]) -> bool:
    refs = ",".join(str(r) for r in info.get("references", []) or [])  # type: ignore[attr-defined]
    nar_hash = str(info["narHash"])
    if nar_hash.startswith("sha256-"):  # SRI: the fingerprint has Nix's own base-32 form
        nar_hash = "sha256:" + nix_base32(base64.b64decode(nar_hash.removeprefix("sha256-")))
    fingerprint = f"1;{info['path']};{nar_hash};{info['narSize']};{refs}".encode()
    for sig in info.get("signatures", []) or []:  # type: ignore[attr-defined]
        name, _, raw = str(sig).partition(":")
        key = keys.get(name)
        if key is None:
            continue
        try:
            key.verify(base64.b64decode(raw), fingerprint)
            return True
        except (InvalidSignature, ValueError):
            continue
    return False


def public_keys(texts: Iterable[str]) -> dict[str, Ed25519PublicKey]:
    keys: dict[str, Ed25519PublicKey] = {}
    for text in texts:
        name, _, raw = text.partition(":")
        try:
            keys[name] = Ed25519PublicKey.from_public_bytes(base64.b64decode(raw))
        except ValueError:
            continue
    return keys


def nix_trusted_keys() -> list[str]:
    """Nix's own trusted-public-keys (when no trace machine config gives them)."""
    out = _run(["nix", *NIX_COMMAND, "show-config", "--json"], "nix show-config")
    value = json.loads(out).get("trusted-public-keys", {}).get("value", [])
    return [str(k) for k in value]


def fetch_missing(paths: Sequence[str], fetch: Sequence[str]) -> None:
    """Substitute `paths` (claims) with the nix-store options `fetch`; what no cache has (or a
    cache that hangs) stays missing. A substitution takes Nix's output locks as a build does, so
    it holds the user's store lock as every realise trace starts (engine/storelock.py)."""
    for batch in batches(paths):
        args = ["nix-store", "--realise", *batch, "--keep-going", *fetch]
        with store_lock(store_of(args)), contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(args, capture_output=True, timeout=_DEADLINE, stdin=subprocess.DEVNULL)


def accepted(pairs: dict[str, str], trusted: Sequence[str], fetch: Sequence[str]) -> dict[str, str]:
    """drv -> claim path for the {drv: out} whose claim this machine has or can substitute,
    signed by a key in `trusted`. `fetch`: the nix-store options to substitute with."""
    keys = public_keys(trusted)
    if not keys:
        return {}
    want = expected(pairs)
    paths = [p for p, _ in want.values()]
    fetch_missing([p for p in paths if not os.path.exists(p)], fetch)
    infos = path_infos(paths)
    ok: dict[str, str] = {}
    for drv, (path, text) in want.items():
        info = infos.get(path)
        if info is None or not _verifies(info, keys):
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                if fh.read() != text:
                    continue
        except OSError:
            continue
        ok[drv] = path
    return ok


def take_claims(nix: Nix, pairs: dict[str, str]) -> dict[str, str]:
    """The signed claims `nix`'s machine accepts for {drv: out} (none for a run that may not
    substitute, such as a replay: it rebuilds everything, its checks included)."""
    if not nix.substitute:
        return {}
    keys = nix.machine.trusted_public_keys
    trusted = keys if keys is not None else nix_trusted_keys()
    return accepted(pairs, trusted, nix.option_args())


def check(
    nix: Nix, steps: dict[str, tuple[str, str, str | None, bool]]
) -> tuple[dict[str, tuple[bool, str | None]], RealiseReport | None]:
    """The determinism checks of {step: (drv, out, built_on, built by this run)}: a signed claim
    where there is one for an output made elsewhere, else a `--check` rebuild (on the machine's
    check pool, not on the machine that built it), after which the passed ones get claims.

    Returns step -> (deterministic, checked_on) and the rebuild's report (None: none ran; when
    Nix itself failed, report.nix_failed, nothing rebuilt counts as deterministic)."""
    elsewhere = {drv: out for drv, out, _, here in steps.values() if not here}
    claimed = take_claims(nix, elsewhere) if elsewhere else {}
    verdicts: dict[str, tuple[bool, str | None]] = {}
    rebuild = {sid: v for sid, v in steps.items() if v[0] not in claimed}
    for sid, (drv, *_) in steps.items():
        if drv in claimed:
            verdicts[sid] = (True, CLAIM_PREFIX + claimed[drv])
    if not rebuild:
        return verdicts, None
    first = {drv: where for drv, _, where, _ in rebuild.values() if where}
    rep = nix.realise([v[0] for v in rebuild.values()], check=True, built_on=first)
    # a failed --check that names no derivation (e.g. a rebuild that itself failed) proves
    # nothing reproducible: none of the checked steps counts as deterministic then
    unexplained = rep.returncode != 0 and not rep.failed
    for sid, (drv, *_) in rebuild.items():
        verdicts[sid] = (drv not in rep.failed and not unexplained, rep.built_on.get(drv))
    passed = {v[0]: v[1] for sid, v in rebuild.items() if verdicts[sid][0]}
    if (
        passed and nix.substitute and not rep.nix_failed
    ):  # (a replay's rebuild makes no claims for others)
        record(passed)
    return verdicts, rep
