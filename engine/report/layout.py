"""A step graph laid out for drawing: layers by topological generation (networkx), left to right.

No graphviz: each layer is one column, ordered by the mean row of the nodes it needs (one
barycentre pass, enough for pipelines of a few dozen steps), edges are cubic curves from the
right edge of a node to the left edge of the next. The SVG itself is drawn by the template
`templates/report/_graph.svg.j2`; this module only computes coordinates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

NODE_H = 40
ROW_GAP = 14
COL_GAP = 56
MARGIN = 12
CHAR_W = 7.2  # monospace 12px
MAX_LABEL = 34


class GraphNode(BaseModel):
    id: str
    label: str
    sublabel: str = ""
    status: str = ""
    x: float = 0
    y: float = 0
    w: float = 0
    h: float = NODE_H


class GraphEdge(BaseModel):
    src: str
    dst: str
    path: str


class Layout(BaseModel):
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    width: float
    height: float
    layers: int


def _short(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def layered(
    nodes: Mapping[str, tuple[str, str]],
    edges: Iterable[tuple[str, str]],
) -> Layout:
    """`nodes`: id -> (sublabel, status); `edges`: (needed, needing). Edges naming an unknown
    node are dropped; a cycle (never in a loaded graph, possible in a forged record) is drawn
    as one layer per node in id order rather than refused."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(sorted(nodes))
    g.add_edges_from((a, b) for a, b in edges if a in nodes and b in nodes and a != b)
    try:
        generations = [sorted(layer) for layer in nx.topological_generations(g)]
    except nx.NetworkXUnfeasible:
        generations = [[n] for n in sorted(nodes)]
    row: dict[str, float] = {}

    def order(layer: list[str], neighbours: Any) -> list[str]:
        def weight(n: str) -> tuple[float, str]:
            seen = [row[p] for p in neighbours(n) if p in row]
            return (sum(seen) / len(seen) if seen else row.get(n, 0.0), n)

        ordered = sorted(layer, key=weight)
        for i, n in enumerate(ordered):
            row[n] = float(i)
        return ordered

    # barycentre sweeps: down by the steps a step needs, up by its users, down again
    columns = [order(layer, g.predecessors) for layer in generations]
    for i in range(len(columns) - 2, -1, -1):
        columns[i] = order(columns[i], g.successors)
    columns = [order(c, g.predecessors) if i else c for i, c in enumerate(columns)]

    placed: dict[str, GraphNode] = {}
    x = float(MARGIN)
    height = 0.0
    for column in columns:
        labels = {n: _short(n) for n in column}
        subs = {n: _short(nodes[n][0]) for n in column}
        width = max(len(t) for n in column for t in (labels[n], subs[n] + "✓ ")) * CHAR_W + 20
        for i, n in enumerate(column):
            y = MARGIN + i * (NODE_H + ROW_GAP)
            placed[n] = GraphNode(
                id=n, label=labels[n], sublabel=subs[n], status=nodes[n][1], x=x, y=y, w=width
            )
            height = max(height, y + NODE_H)
        x += width + COL_GAP
    out_edges: list[GraphEdge] = []
    for a, b in sorted(g.edges):
        s, d = placed[a], placed[b]
        x1, y1 = s.x + s.w, s.y + s.h / 2
        x2, y2 = d.x, d.y + d.h / 2
        mid = (x1 + x2) / 2
        path = f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2 - 2:.1f},{y2:.1f}"
        out_edges.append(GraphEdge(src=a, dst=b, path=path))
    return Layout(
        nodes=[placed[n] for column in columns for n in column],
        edges=out_edges,
        width=max(x - COL_GAP + MARGIN, 2 * MARGIN),
        height=height + MARGIN,
        layers=len(columns),
    )
