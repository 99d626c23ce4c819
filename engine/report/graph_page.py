"""`trace graph --format svg|html`: a pipeline's step graph drawn without graphviz."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.report.jinja_env import render_page
from engine.report.layout import layered

if TYPE_CHECKING:
    from engine.graphtypes import Graph


def graph_picture(graph: Graph, fmt: str) -> str:
    """The step graph as a standalone SVG document (`svg`) or an offline HTML page (`html`)."""
    nodes = {sid: (step.kind, "step") for sid, step in graph.steps.items()}
    edges = [(need, sid) for sid, step in graph.steps.items() for need in step.needs]
    layout = layered(nodes, edges)
    steps = [
        {"id": sid, "kind": graph.steps[sid].kind, "needs": sorted(graph.steps[sid].needs)}
        for sid in graph.order
    ]
    template = "graph.svg.j2" if fmt == "svg" else "graph.html.j2"
    return render_page(template, layout=layout, steps=steps, name=str(graph.entry.name))
