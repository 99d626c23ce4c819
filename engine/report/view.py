"""The report of one bundle as data for the template: the verdict first (verdict.py), then the
claim stack in the order a reviewer audits it:

advisory → upstream reference → diff and rationale → review → reproducer runs (pre and post side
by side) → gates → routing and signing decision → replay record → signature; then the step graph,
the timings, an accuracy comparison when the bundle has one, and every other file.

Each link has a state of its own, drawn in the claim-stack picture and on its section: `ok`
(green: its files and checks verify and what it claims holds), `amber` (intact, but it does not
hold: a claim fails, a gate fails, the decision denies, the bundle is unsigned), `bad` (red: a
file changed, a check of its integrity fails) or `absent` (grey: not in this bundle).

Records are read as plain JSON (dicts), not through the engine's pydantic models: a report must
show a bundle written by another trace version, or a forged one, rather than refuse it, and gate
records grow new fields while the page stays generic (the template renders any value).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from engine.audit.signature import Check
from engine.report import sections as sec
from engine.report.diff import diff_rows
from engine.report.layout import Layout
from engine.report.lenient_json import as_dict, as_str
from engine.report.load import Link, LoadedBundle
from engine.report.stacks import Stack, fault_stack, patched
from engine.report.timings import TimingsView, read_timings, timings_view
from engine.report.verdict import INTENT_REASONS, Verdict, build_verdict

LinkState = Literal["ok", "amber", "bad", "absent"]
STACK = ("advisory", "upstream", "patch", "review", "runs", "gates", "decision", "signature")
AMBER = {
    "signature": "intact, not signed",
    "decision": "intact, denies",
    "gates": "intact, a gate fails",
    "runs": "intact, a claim fails",
}
SHORT = {
    "patch": "diff",
    "runs": "reproducer runs",
    "upstream": "upstream ref",
    "decision": "decision",
}


class Section(BaseModel):
    """One link of the claim stack: its files, the checks that vouch for it, and its data."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    title: str
    links: list[Link]
    checks: list[Check] = []
    data: dict[str, Any] = {}
    present: bool = True
    holds: bool = True  # what the link claims holds (a claim, a gate, the decision)

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    @property
    def state(self) -> LinkState:
        if not self.present:
            return "absent"
        failing = [c for c in self.checks if not c.ok]
        if not all(link.ok for link in self.links) or any(
            c.reason not in INTENT_REASONS for c in failing
        ):
            return "bad"
        return "amber" if failing or not self.holds else "ok"

    @property
    def label(self) -> str:
        if self.state == "amber" and self.id in AMBER:
            return AMBER[self.id]
        return {
            "ok": "verified",
            "amber": "intact, does not hold",
            "bad": "NOT verified",
            "absent": "not in this bundle",
        }[self.state]

    @property
    def short(self) -> str:
        return SHORT.get(self.id, self.title.split(" ", 1)[0].lower())


class ReportView(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    bundle: LoadedBundle
    name: str
    candidate: str
    package: str
    verdict: Verdict
    sections: list[Section]
    graph: Layout | None
    timings: dict[str, str]
    step_timings: TimingsView
    fault: Stack | None
    others: list[Link]
    fork_root: str = ""

    @property
    def stack(self) -> list[Section]:
        by_id = {s.id: s for s in self.sections}
        return [by_id[i] for i in STACK if i in by_id]

    @property
    def toc(self) -> list[tuple[str, str]]:
        """Every numbered heading in page order: the contents and the headings share it."""
        return [
            *((s.id, s.title) for s in self.sections),
            ("verification", "Integrity: the checks of trace verify-bundle"),
            ("step-graph", "Step graph"),
            ("timings", "Timings"),
            ("files", "Every file of the bundle"),
        ]

    def no(self, anchor: str) -> int:
        return [a for a, _ in self.toc].index(anchor) + 1

    def section(self, anchor: str) -> Section | None:
        return next((s for s in self.sections if s.id == anchor), None)


Links = Callable[..., list[Link]]


def _front(b: LoadedBundle, links: Links) -> list[Section]:
    """advisory, upstream reference, diff, review."""
    return [
        Section(
            id="advisory",
            title="Advisory",
            links=links("advisory.json"),
            data={"doc": as_dict(b.doc("advisory.json"))},
            present="advisory.json" in b.links,
        ),
        Section(
            id="upstream",
            title="Upstream reference",
            links=links("upstream.json"),
            data={"doc": as_dict(b.doc("upstream.json")), "fix_refs": sec.fix_refs(b)},
            present="upstream.json" in b.links,
        ),
        Section(
            id="patch",
            title="Diff and rationale",
            links=links("rationale.md", prefix=("patches/",)),
            data={"patches": sec.patches(b), "rationale": b.get("rationale.md")},
            present=bool(b.under("patches/")),
        ),
        Section(
            id="review",
            title="Review",
            links=links("review.md"),
            data={"review": b.get("review.md")},
            present="review.md" in b.links,
        ),
    ]


def _evidence(b: LoadedBundle, links: Links) -> list[Section]:
    """reproducer runs, gates, decision."""
    runs = sec.runs(b, patched(b))
    gates = sec.gates(b)
    signing = sec.signing(b)
    return [
        Section(
            id="runs",
            title="Reproducer runs: pre-fix and post-fix",
            links=links("verify-result.json", prefix=("reproducer/", "outcomes/")),
            checks=b.checks_for("runs"),
            data=runs,
            present=bool(runs["verify"]),
            holds=runs["verify"].get("passed") is True,
        ),
        Section(
            id="gates",
            title="Gates",
            links=links(prefix=("gates/",)),
            checks=b.checks_for("gates"),
            data={"gates": gates},
            present=bool(gates),
            holds=all(g["record"].get("passed") is True for g in gates),
        ),
        Section(
            id="decision",
            title="Routing and signing decision",
            links=links(
                "decisions/routing.json",
                "decisions/signing.json",
                "policy/maintainers.toml",
                prefix=("waivers/",),
            ),
            checks=b.checks_for("decision"),
            data={"signing": signing, "routing": as_dict(b.doc("decisions/routing.json"))},
            present="decisions/signing.json" in b.links,
            holds=signing.get("decision") == "allow",
        ),
    ]


def _back(b: LoadedBundle, links: Links) -> list[Section]:
    """replay record, signature, and an accuracy comparison when there is one."""
    out = [
        Section(
            id="replay",
            title="Replay record",
            links=links("replay.json"),
            checks=b.checks_for("replay"),
            data={"doc": as_dict(b.doc("replay.json"))},
            present="replay.json" in b.links,
        ),
        Section(
            id="signature",
            title="Signature",
            links=[],
            checks=b.checks_for("signature"),
            data=sec.signature(b),
        ),
    ]
    accuracy = [link for link in b.links.values() if link.kind == "accuracy"]
    if "accuracy.json" in b.links and b.links["accuracy.json"] not in accuracy:
        accuracy.append(b.links["accuracy.json"])
    if accuracy:
        docs = [(a, a.doc, diff_rows(as_str(as_dict(a.doc).get("diff")))) for a in accuracy]
        out.append(
            Section(
                id="accuracy",
                title="Accuracy against the human fix",
                links=links(*(a.path for a in accuracy)),
                data={"docs": docs},
            )
        )
    return out


def fork_root(verify: dict[str, Any]) -> str:
    """The fork's absolute directory on the machine that ran verify (from its entry pipeline
    file), to be shown as `<fork>`; empty when the record holds no absolute path."""
    graph = as_str(verify.get("graph"))
    return graph.rsplit("/", 1)[0] if graph.startswith("/") and "/" in graph[1:] else ""


def build_view(b: LoadedBundle) -> ReportView:
    shown: set[str] = set()

    def links(*paths: str, prefix: tuple[str, ...] = ()) -> list[Link]:
        found = [b.links[p] for p in paths if p in b.links]
        for pre in prefix:
            found += b.under(pre)
        shown.update(link.path for link in found)
        return found

    sections = [*_front(b, links), *_evidence(b, links), *_back(b, links)]
    verify = sections[4].data["verify"]
    signing = sections[6].data["signing"]
    routing = sections[6].data["routing"]
    candidate = as_str(signing.get("candidate") or verify.get("candidate")) or "unknown candidate"
    return ReportView(
        bundle=b,
        name=b.directory.rstrip("/").rsplit("/", 1)[-1],
        candidate=candidate,
        package=as_str(verify.get("package") or as_dict(routing.get("facts")).get("package")),
        verdict=build_verdict(b),
        sections=sections,
        graph=sec.graph(b, verify),
        timings=sec.timings(b.statement),
        step_timings=timings_view(Path(b.directory), b.statement, read_timings(Path(b.directory))),
        fault=fault_stack(verify, patched(b)),
        others=[link for p, link in sorted(b.links.items()) if p not in shown],
        fork_root=fork_root(verify),
    )
