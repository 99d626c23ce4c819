"""`trace graph`'s drawings of a pipeline's step graph: Graphviz dot and Mermaid text here, an SVG
or an offline HTML page in engine.report.graph_page (loaded only for those)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.graphtypes import Graph


def draw(graph: Graph, fmt: str) -> str:
    """The step graph as `fmt`: dot, mermaid, svg or html."""
    if fmt in ("svg", "html"):
        from engine.report.graph_page import graph_picture

        return graph_picture(graph, fmt)
    import networkx as nx

    g = nx.DiGraph()
    for sid, step in graph.steps.items():
        g.add_node(sid, kind=step.kind)
        g.add_edges_from((n, sid) for n in step.needs)
    ids = {sid: f"n{i}" for i, sid in enumerate(graph.order)}
    out: list[str] = []
    if fmt == "dot":
        out.append("digraph trace {\n  rankdir=LR;")
        for layer, nodes in enumerate(nx.topological_generations(g)):
            out.append(f"  {{ rank=same; // layer {layer}")
            for sid in sorted(nodes):
                label = json.dumps(f"{sid}\n({g.nodes[sid]['kind']})")  # JSON's \n = DOT's
                out.append(f"    {ids[sid]} [label={label}];")
            out.append("  }")
        out.extend(f"  {ids[a]} -> {ids[b]};" for a, b in sorted(g.edges))
        out.append("}")
    else:
        out.append("flowchart LR")
        for sid in graph.order:
            out.append(f'  {ids[sid]}["{sid} ({g.nodes[sid]["kind"]})"]')
        out.extend(f"  {ids[a]} --> {ids[b]}" for a, b in sorted(g.edges))
    return "\n".join(out)
