"""`trace waive`'s work: a maintainer signs a waiver of ONE reason code for ONE candidate's
current patch (engine.policy.signed_waiver), written where `trace fork` and `--waivers` find it.

Refused (exit 2, nothing written): a code the catalogue does not define or marks
`waivable = false`; a justification under 20 characters; a key that is trace's own signing key
(the signer lock beside the signing policy). A key the maintainers policy does not list still
signs (a maintainer may sign before the policy names them), but the result says so: every
decision ignores such a waiver until the key is listed.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from engine.errors import PolicyError, UsageError
from engine.files import write_atomic
from engine.paths import cli
from engine.policy.signed_waiver import (
    WaiverStatement,
    candidate_patch,
    sign_statement,
    trace_keys,
    waiver_trust,
)

DEFAULT_DAYS = 90
FORK_WAIVERS = Path("trace") / "policy" / "waivers"


class Waived(BaseModel):
    """What `write_waiver` wrote."""

    model_config = ConfigDict(frozen=True)

    path: Path
    statement: WaiverStatement
    maintainer: str | None  # the name the maintainers policy gives the key (None: unlisted)


def write_waiver(
    candidate_file: Path,
    code: str,
    justification: str,
    key_file: Path,
    *,
    fork: Path | None = None,
    signing_policy: Path | None = None,
    maintainers: Path | None = None,
    out: Path | None = None,
    today: dt.date,
    expires: dt.date | None = None,
) -> Waived:
    from engine.candidate import load_candidate
    from engine.gates.context import signing_policy_path
    from engine.policy.signing_decision import load_signing
    from engine.signing.keys import key_hint, load_private_key
    from engine.verify.fork_graph import find_fork

    cand = load_candidate(candidate_file)
    root = (fork or find_fork(cand.path) or cand.dir).resolve()
    policy = signing_policy_path(signing_policy, root)
    _, catalogue = load_signing(policy)
    spec = catalogue.get(code)
    if spec is None:
        raise UsageError(
            f"'{code}' is not a reason code of {catalogue.ref.path}",
            hint=f"name a code from the decision's reasons (`{cli('decide')}`)",
        )
    if not spec.waivable:
        raise PolicyError(
            f"reason '{code}' cannot be waived (waivable = false in the catalogue)",
            file=policy,
            hint="fix the evidence instead; this reason marks a claim that does not hold",
        )
    if len(justification.strip()) < 20:
        raise UsageError("--justification needs at least 20 characters: say why it is right")
    key = load_private_key(key_file)
    hint = key_hint(key.public_key())
    own = trace_keys(policy)
    if hint in own:
        raise UsageError(
            f"{key_file} is {own[hint]}: a waiver needs a maintainer's own key",
            hint=f"sign with your key from `{cli('keygen')}`, listed in maintainers.toml",
        )
    statement = WaiverStatement(
        candidate=cand.spec.id,
        patch_sha256=candidate_patch(cand),
        reason=code,
        justification=justification.strip(),
        signer=hint,
        date=today,
        expires=expires or today + dt.timedelta(days=DEFAULT_DAYS),
    )
    dest = out or root / FORK_WAIVERS / f"{cand.spec.id}.{code}.json"
    write_atomic(dest, sign_statement(statement, key), durable=True)
    trust = waiver_trust(signing_policy=policy, fork=root, candidate=cand, maintainers=maintainers)
    listed = trust.maintainers.keys.get(hint)
    return Waived(path=dest, statement=statement, maintainer=listed[0] if listed else None)
