"""`trace report`: one self-contained HTML page from a bundle and its verify-bundle verdict."""

from __future__ import annotations

from pathlib import Path

from engine.audit.checks import BundleVerdict
from engine.report.jinja_env import render_page
from engine.report.load import load_bundle
from engine.report.verdict import INTENT_REASONS
from engine.report.view import ReportView, build_view


def render_report(view: ReportView) -> str:
    from engine import __version__
    from engine.audit.reasons import REASONS

    return render_page(
        "report.html.j2",
        script="report.js",
        view=view,
        fork_root=view.fork_root,
        intent_reasons=sorted(INTENT_REASONS),
        bundle_reasons=REASONS,
        engine_version=__version__,
    )


def report_html(directory: Path, verdict: BundleVerdict) -> str:
    """The page for the bundle at `directory`; `verdict` is verify_bundle's for it."""
    return render_report(build_view(load_bundle(directory, verdict)))
