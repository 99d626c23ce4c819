"""Typed payload entries for one candidate: every claim of the bundle as its own file.

| path                         | kind       | from                                           |
|------------------------------|------------|------------------------------------------------|
| candidate.toml               | other      | the candidate file                             |
| advisory.json                | advisory   | the OSV advisory                               |
| upstream.json                | upstream   | the upstream fix reference (when given)        |
| patches/<n>-<name>           | patch      | each patch, canonical `-U0` diff form          |
| rationale.md, review.md      | rationale, review | when the candidate names them           |
| reproducer/<name>            | reproducer | the script and its data files                  |
| variants/<id>/...            | reproducer | each variant of the PoC that still crashes the |
|                              |            | post-fix build (variants gate): repro.sh and   |
|                              |            | data/*, from the variant-post step's output    |
| model.json                   | other      | model id, prompt digest, parameters (if any)   |
| prompt.txt                   | other      | the prompt (when the candidate names one)      |
| outcomes/<step id>.json      | run / gate | every step's outcome as built (all K runs)     |
| verify-result.json           | verify     | `trace verify`'s VerifyResult: claims, verdict, |
|                              |            | the K run records of each side (build failures |
|                              |            | included), determinism and flakiness           |
| gates/<gate>.json            | gate       | every gate record: the run's gate steps'       |
|                              |            | outcomes, the determinism record derived from  |
|                              |            | the --check results, `--gate` files' records   |
| decisions/routing.json       | routing    | the routing decision (policy + critical list   |
|                              |            | name, version, digest)                         |
| decisions/signing.json       | signing    | the signing decision record (`trace decide`'s) |
| policy/<file>                | signing    | the signing policy file the decision applied,  |
|                              |            | byte for byte (its sha256 is the decision's    |
|                              |            | policy digest), and the reason catalogue it    |
|                              |            | names when that is a file beside it            |

The bundle adds `replay.json`, `redaction.json` and `index.json` (every file's claim kind).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from engine.build_records import GateRecord
from engine.candidate import Candidate
from engine.errors import InputError
from engine.evidence.bundle import OUTCOMES_DIR, POLICY_DIR
from engine.evidence.payload import (
    ClaimKind,
    PayloadEntry,
    diff_entry,
    json_entry,
    text_entry,
)
from engine.evidence.replay import ModelPin, RunHost, SourcePin
from engine.policy.evidence_view import SourceRef, add_gate_record
from engine.run import RunResult
from engine.verify_result import VerifyResult

if TYPE_CHECKING:
    from engine.evidence.bundle import Assembled
    from engine.graphtypes import Graph

VERIFY_RESULT_PATH = "verify-result.json"
GATES_DIR = "gates"
GATE_SCHEMA = "trace.gate/v1"


def _file_entry(path: str, kind: ClaimKind, source: Path) -> PayloadEntry:
    data = source.read_bytes()
    try:
        return text_entry(path, kind, data.decode("utf-8"))
    except UnicodeDecodeError:
        return PayloadEntry(path=path, kind=kind, data=data, media_type="application/octet-stream")


def model_pin(candidate: Candidate) -> ModelPin | None:
    m = candidate.spec.model
    if m is None:
        return None
    prompt = hashlib.sha256(candidate.file(m.prompt).read_bytes()).hexdigest() if m.prompt else None
    from engine.evidence.agent_claims import transcript_pins

    pins = transcript_pins(candidate)
    return ModelPin(id=m.id, prompt_sha256=prompt, parameters=m.parameters, transcripts=pins)


def candidate_entries(candidate: Candidate) -> list[PayloadEntry]:
    s = candidate.spec
    out = [
        _file_entry("candidate.toml", "other", candidate.path),
        _file_entry("advisory.json", "advisory", candidate.file(s.advisory.osv)),
    ]
    if s.advisory.upstream_fix:
        out.append(
            json_entry("upstream.json", "upstream", {"upstream_fix": s.advisory.upstream_fix})
        )
    for i, rel in enumerate(s.patches):
        out.append(
            diff_entry(f"patches/{i + 1:02d}-{Path(rel).name}", candidate.patch_bytes(rel, i))
        )
    for i, rel in enumerate(s.advisory.upstream_patches):  # the differential gate's third side
        out.append(
            _file_entry(f"upstream/{i + 1:02d}-{Path(rel).name}", "upstream", candidate.file(rel))
        )
    if s.rationale:
        out.append(_file_entry("rationale.md", "rationale", candidate.file(s.rationale)))
    if s.review:
        out.append(_file_entry("review.md", "review", candidate.file(s.review)))
    out.append(
        _file_entry(
            f"reproducer/{Path(s.reproducer.script).name}",
            "reproducer",
            candidate.file(s.reproducer.script),
        )
    )
    for rel in s.reproducer.data:
        out.append(
            _file_entry(f"reproducer/data/{Path(rel).name}", "reproducer", candidate.file(rel))
        )
    pin = model_pin(candidate)
    if pin is not None:
        # (a drafted candidate's transcripts: in the replay record and agent/, not here)
        out.append(json_entry("model.json", "other", pin.model_dump(exclude={"transcripts"})))
        if s.model and s.model.prompt:
            out.append(_file_entry("prompt.txt", "other", candidate.file(s.model.prompt)))
    from engine.evidence.agent_claims import draft_entries

    return out + draft_entries(candidate)


def _outcome_kind(outcome: Any) -> ClaimKind:
    schema = outcome.get("schema") if isinstance(outcome, dict) else None
    return "gate" if schema == GATE_SCHEMA else "run"


def outcome_entries(run: RunResult) -> list[PayloadEntry]:
    """Every step's outcome, then the still-failing variants' reproducers (variant_entries)."""
    return [
        json_entry(f"{OUTCOMES_DIR}/{sid}.json", _outcome_kind(r.outcome), r.outcome)
        for sid, r in sorted(run.steps.items())
        if r.outcome is not None
    ] + variant_entries(run)


VARIANTS_DIR = "variants"
VARIANT_GATE_STEP = "gate-variants"
VARIANT_POST_STEP = "variant-post"
# the fuzzing gate's found inputs: the same shape, their own directory and steps
FUZZ_DIR = "fuzz"
FUZZ_GATE_STEP = "gate-fuzz"
FUZZ_POST_STEP = "fuzz-post"


def variant_entries(run: RunResult) -> list[PayloadEntry]:
    """Each variant the variants gate found still failing, and each input the fuzzing gate
    found crashing the post-fix build, as a replayable reproducer: `variants/<id>/repro.sh`
    and `variants/<id>/data/<name>` (`fuzz/<id>/...` for the fuzzer's), read from the output
    of the post-fix variant-run step (`variant-post`, `fuzz-post`: its outcome records every
    run, the crash included; `verify-bundle --replay` rebuilds that step, running the crashing
    input again). The files' sha256 are in the gate record (`still_failing[].files`)."""
    return _still_failing(run, VARIANT_GATE_STEP, VARIANT_POST_STEP, VARIANTS_DIR) + (
        _still_failing(run, FUZZ_GATE_STEP, FUZZ_POST_STEP, FUZZ_DIR)
    )


def _still_failing(run: RunResult, gate_step: str, post_step: str, top: str) -> list[PayloadEntry]:
    gate = run.steps.get(gate_step)
    details = gate.outcome.get("details") if gate and isinstance(gate.outcome, dict) else None
    if not isinstance(details, dict):
        return []
    out: list[PayloadEntry] = []
    for item in details.get("still_failing") or []:
        src = _variant_dir(run, int(item["index"]), post_step)
        if src is None:
            continue
        base = f"{top}/{item['id']}"
        out.append(_file_entry(f"{base}/repro.sh", "reproducer", src / "repro.sh"))
        for name in sorted(item.get("files") or {}):
            # byte for byte (not canonicalised as text): the input must crash as recorded
            data = (src / "data" / name).read_bytes()
            out.append(
                PayloadEntry(
                    path=f"{base}/data/{name}",
                    kind="reproducer",
                    data=data,
                    media_type="application/octet-stream",
                )
            )
    return out


def _variant_dir(run: RunResult, index: int, post_step: str = VARIANT_POST_STEP) -> Path | None:
    """Variant `index`'s reproducer as its post-fix run kept it: `v/<index>/variant` of the one
    post-fix variant-run step (trace_sandbox/gates/variant_runs.py), or the `variant` dir of a
    `variant-post@<index>` step (a graph that still runs one step per variant)."""
    batch = run.steps.get(post_step)
    if batch is not None and batch.out is not None:
        return Path(batch.out) / "v" / str(index) / "variant"
    step = run.steps.get(f"{post_step}@{index}")
    return Path(step.out) / "variant" if step is not None and step.out is not None else None


def verify_entry(result: VerifyResult, root: Path) -> PayloadEntry:
    """The verify result as bundled: without the machines each step ran on (MACHINE_KEYS), which
    the statement's runDetails carry, and with its file paths relative to the fork `root`
    (engine.evidence.portable), so two machines' and two checkouts' bundles of one result are
    the same."""
    from engine.evidence.portable import portable_verify
    from engine.verify_result import MACHINE_KEYS

    doc = portable_verify(result.model_dump(mode="json", by_alias=True), root)
    return json_entry(VERIFY_RESULT_PATH, "verify", _without(doc, MACHINE_KEYS))


def _without(value: Any, keys: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_without(v, keys) for v in value]
    return value


def gate_records(
    result: VerifyResult, run: RunResult, extra: Sequence[tuple[str, GateRecord]] = ()
) -> dict[str, GateRecord]:
    """Every gate record, by gate name, from the builds: first the records the run's gate steps
    wrote (their outcomes), then the records `judge` derives from the run itself (determinism,
    from the engine's --check results), then `extra` (source, record) pairs such as `--gate`
    files. The verify result's own records (`expectation`, `gates`) are never taken on trust:
    each must equal the one the run produced, or it is an error."""
    from engine.verify.verdict import derived_gate_records

    found: dict[str, GateRecord] = {}
    origin: dict[str, str] = {}
    for sid, step in sorted(run.steps.items()):
        outcome = step.outcome
        if isinstance(outcome, dict) and outcome.get("schema") == GATE_SCHEMA:
            record = GateRecord.model_validate(outcome)
            if record.gate in found and found[record.gate] != record:
                raise InputError(
                    f"steps '{origin[record.gate]}' and '{sid}' both wrote a record for gate "
                    f"'{record.gate}', and they differ",
                    hint="give each gate step its own gate name",
                )
            found[record.gate] = record
            origin[record.gate] = sid
    for record in derived_gate_records(run):
        if record.gate in found:
            raise InputError(
                f"step '{origin[record.gate]}' wrote a record for gate '{record.gate}', a name "
                "trace verify derives itself",
                hint="rename that gate",
            )
        found[record.gate] = record
        origin[record.gate] = "the engine's --check results"
    carried = [result.expectation] if result.expectation is not None else []
    carried += list(result.gates.values())
    for record in carried:
        produced = found.get(record.gate)
        if produced is None:
            raise InputError(
                f"the verify result carries a record for gate '{record.gate}' that no step of "
                "the run produced",
                hint="records come from the builds; rerun `trace verify`",
            )
        if produced != record:
            raise InputError(
                f"the verify result's record for gate '{record.gate}' disagrees with the one "
                f"{origin[record.gate]} produced",
                hint="records come from the builds; rerun `trace verify`",
            )
    for source, record in extra:
        add_gate_record(found, source, record)
    return found


def read_gate_files(paths: Sequence[Path]) -> list[tuple[str, GateRecord, bytes]]:
    """`--gate FILE` records: (source, record, raw bytes)."""
    out: list[tuple[str, GateRecord, bytes]] = []
    for path in paths:
        try:
            raw = path.read_bytes()
            out.append((str(path), GateRecord.model_validate_json(raw), raw))
        except OSError as exc:
            raise InputError(f"cannot read gate record: {exc.strerror}", file=path) from None
        except ValidationError as exc:
            raise InputError(
                f"not a gate record (trace.gate/v1): {exc.errors()[0]['msg']}", file=path
            ) from None
    return out


def evidence_sources(
    result: VerifyResult, gates: dict[str, GateRecord], root: Path
) -> list[SourceRef]:
    """What a signing decision over (result, gates) read: the bundle payload files they become
    (`payload/verify-result.json`, `payload/gates/<gate>.json`) with the sha256 of their bundled
    bytes. `trace decide`, `trace bundle` and `trace fork` name the same files the same way, so
    a decision record can be checked against the bundle it goes into."""
    from engine.evidence.decisions import payload_ref

    first = payload_ref(verify_entry(result, root))
    return [first] + [payload_ref(e) for e in gate_entries(gates)]


def gate_entries(records: dict[str, GateRecord]) -> list[PayloadEntry]:
    return [
        json_entry(f"{GATES_DIR}/{name}.json", "gate", rec.model_dump(mode="json", by_alias=True))
        for name, rec in sorted(records.items())
    ]


def decision_entry(name: str, kind: ClaimKind, decision: Any, root: Path) -> PayloadEntry:
    """A decision as bundled: its policy references' paths relative to the fork `root`."""
    from engine.evidence.portable import portable_refs

    value = (
        decision.model_dump(mode="json", by_alias=True)
        if isinstance(decision, BaseModel)
        else decision
    )
    return json_entry(f"decisions/{name}.json", kind, portable_refs(value, root))


def policy_versions(value: Any) -> dict[str, str]:
    """Every `{name, version, digest}` policy reference found inside a decision, name -> version."""
    found: dict[str, str] = {}
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True)
    if isinstance(value, dict):
        if {"name", "version", "digest"} <= value.keys() and isinstance(value["version"], str):
            found[str(value["name"])] = value["version"]
        for v in value.values():
            found.update(policy_versions(v))
    elif isinstance(value, list):
        for v in value:
            found.update(policy_versions(v))
    return found


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def policy_entries(signing_policy: Path) -> list[PayloadEntry]:
    """The signing policy the decision was made under, byte for byte (`policy/<name>`: its
    sha256 is the digest the decision and the statement pin, so verify-bundle can re-run the
    decision offline with it and compare it with the fork's file), and the reason catalogue it
    names when that is a plain file name beside it (a fork's merged `reasons.toml`)."""
    from engine.policy.signing_decision import load_signing_rules

    _, _, catalogue = load_signing_rules(signing_policy)
    files = [signing_policy]
    beside = signing_policy.parent / catalogue
    if "/" not in catalogue and ":" not in catalogue and beside.is_file():
        files.append(beside)
    return [
        PayloadEntry(
            path=f"{POLICY_DIR}/{f.name}",
            kind="signing",
            data=f.read_bytes(),
            media_type="application/toml",
        )
        for f in files
    ]


def assemble_evidence(
    candidate: Candidate,
    graph: Graph,
    run: RunResult,
    entries: list[PayloadEntry],
    routing: Any,
    decision: Any,
    *,
    root: Path,
    signing_policy: Path,
    builder_id: str,
    dirty: bool | None = None,
    ran: tuple[dt.datetime, dt.datetime] | None = None,
    source: SourcePin | None = None,
    host: RunHost | None = None,
    timings: dict[str, Any] | None = None,
) -> Assembled:
    """The bundle's last links, shared by `trace bundle`, `trace verify --bundle` and
    `trace fork`: the routing and signing decisions as payload files, their policy versions, the
    replay record (`dirty` overrides its fork pin's own clean check when the caller made a
    better one), and the assembled statement (`ran`: when the run whose results these are began
    and ended, for the provenance's startedOn/finishedOn; `host`: the Nix version, system and git
    state asked once per run by a caller that assembles many bundles; `timings`: the run's
    trace.step-timings/v1 document, written beside the payload: engine.evidence.timings)."""
    from engine.evidence.bundle import assemble
    from engine.evidence.replay import build_replay_record

    entries = [
        *entries,
        decision_entry("routing", "routing", routing, root),
        decision_entry("signing", "signing", decision, root),
        *policy_entries(signing_policy),
    ]
    replay = build_replay_record(
        graph,
        run,
        candidate_file=candidate.path,
        root=root,
        model=model_pin(candidate),
        signing_policy=signing_policy,
        host=host,
    )
    if dirty is not None and replay.package_set is not None:
        pinned = replay.package_set.model_copy(update={"dirty": dirty})
        replay = replay.model_copy(update={"package_set": pinned})
    if source is not None:
        replay = replay.model_copy(update={"source": source})
    return assemble(
        entries,
        replay=replay,
        candidate_id=candidate.spec.id,
        policy_versions={**policy_versions(routing), **policy_versions(decision)},
        builder_id=builder_id,
        started=ran[0] if ran else None,
        finished=ran[1] if ran else None,
        machines={sid: (r.built_on, r.checked_on) for sid, r in run.steps.items()},
        timings=timings,
    )
