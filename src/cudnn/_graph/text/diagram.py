"""Pictures of a graph with no system binary: Graphviz DOT text, and SVG drawn here.

A graph becomes a `Picture`: boxes (ops, and the tensors the caller binds: inputs, outputs,
by-value scalars, workspace scratch) joined by edges; an edge between two ops is a virtual
tensor and carries its name, dims and data type. The layout is a simple layered one: each box
sits one layer below the deepest box feeding it, and boxes within a layer are ordered by the
mean position of their neighbours. Composite nodes (attention, norms that expand) are one box
unless ``expand=True``, which draws the primitive nodes the expansion builds, framed together.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape, quoteattr

from ..._lib import loader
from ..model.expand import expand as expand_nodes
from ..model.graph_errors import GraphError
from ..model.node import Node

if TYPE_CHECKING:
    from ..model.graph_view import GraphView
    from ..model.tensor import Tensor

# Tags of nodes drawn as composites when only the printed JSON is known (a live graph asks
# the node class whether it has an expansion).
COMPOSITE_TAGS = frozenset({"SDPA_FWD", "SDPA_BWD"})
_HIDDEN = {"inputs", "outputs", "name", "tag", "mode", "compute_data_type", "_group"}
_MAX_ATTRS = 4

# fill, stroke, shape: one line per kind of box
STYLE = {
    "op": ("#e8f0fe", "#3367d6", "box"),
    "composite": ("#fff4e5", "#e37400", "box"),
    "input": ("#e6f4ea", "#188038", "pill"),
    "output": ("#fce8e6", "#c5221f", "pill"),
    "scalar": ("#f1f3f4", "#5f6368", "pill"),
    "scratch": ("#f3e8fd", "#8430ce", "pill"),
    "virtual": ("#ffffff", "#5f6368", "pill"),  # a virtual tensor no op joins (only in a broken graph)
}
LEGEND = (("op", "op"), ("composite", "composite op"), ("input", "input tensor"), ("output", "output tensor"),
          ("scalar", "by-value scalar"), ("scratch", "workspace scratch"))


@dataclass
class Box:
    """One drawn box: an op or a tensor the caller binds."""

    id: str
    kind: str  # a key of STYLE
    lines: list[str]
    group: str = ""  # the expanded composite it belongs to
    layer: int = 0
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0


@dataclass
class Edge:
    """A tensor flowing from one box to another; ``virtual`` edges carry the tensor itself."""

    src: str
    dst: str
    label: list[str]
    virtual: bool


@dataclass
class Picture:
    """Boxes, edges and groups of one graph, laid out on first use; `svg()` and `dot()` draw it."""

    name: str
    boxes: dict[str, Box] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)  # group id -> caption
    note: str = ""  # a line drawn under the title (e.g. why the graph does not validate)
    _laid_out: bool = False

    def dot(self) -> str:
        return to_dot(self)

    def svg(self) -> str:
        return to_svg(self)


# -- the model --------------------------------------------------------------------------------

def tensor_text(name: str, t: Mapping[str, Any]) -> list[str]:
    """'conv::Y' and '[4,64,28,28] FLOAT' (and the value of a constant)."""
    dims = t.get("dim") or []
    dtype = t.get("data_type") or "?"
    shape = "[" + ",".join(str(d) for d in dims) + "]" if dims else "[?]"
    second = f"{shape} {dtype}"
    if t.get("pass_by_value") is not None:
        second += f" = {t['pass_by_value']}"
    return [name, second]


def node_text(node: Mapping[str, Any]) -> list[str]:
    """Name, op (with its mode) and up to four attributes that are set."""
    op = str(node.get("tag", "?"))
    if node.get("mode"):
        op += f" {node['mode']}"
    lines = [str(node.get("name", "")), op]
    attrs = [(k, v) for k, v in sorted(node.items()) if k not in _HIDDEN and v not in (None, False, [], {}, "")]
    for key, value in attrs[:_MAX_ATTRS]:
        text = json.dumps(value, separators=(",", ":")) if not isinstance(value, str) else value
        lines.append(f"{key} {text if len(text) <= 28 else text[:25] + '...'}")
    if len(attrs) > _MAX_ATTRS:
        lines.append(f"+{len(attrs) - _MAX_ATTRS} more")
    return lines


def build(doc: Mapping[str, Any], composite: set[str] | None = None,
          groups: Mapping[str, str] | None = None, scratch: frozenset[str] | set[str] = frozenset()) -> Picture:
    """The picture of a graph's JSON (``graph.to_json()`` or ``json.loads(str(graph))``).

    ``composite``: names of nodes drawn as composites (None: those of a COMPOSITE_TAGS tag);
    ``groups``: caption of each expanded composite, named by the ``_group`` key of its parts;
    ``scratch``: tensors in the workspace."""
    nodes = doc.get("nodes")
    tensors = doc.get("tensors") or {}
    if not isinstance(nodes, list) or not isinstance(tensors, Mapping):
        raise GraphError("picture: expected a graph's JSON with a 'nodes' list and a 'tensors' object")
    pic = Picture(str((doc.get("context") or {}).get("name") or "graph"), groups=dict(groups or {}))
    producer: dict[str, str] = {}
    consumers: dict[str, list[tuple[str, str]]] = {}
    for i, node in enumerate(nodes):
        box_id = f"n{i}"
        is_composite = node.get("tag") in COMPOSITE_TAGS if composite is None else node.get("name") in composite
        kind = "composite" if is_composite else "op"
        pic.boxes[box_id] = Box(box_id, kind, node_text(node), str(node.get("_group", "")))
        for name in (node.get("outputs") or {}).values():
            producer.setdefault(name, box_id)
        for port, name in (node.get("inputs") or {}).items():
            consumers.setdefault(name, []).append((box_id, port))
    names = list(tensors) + [n for n in [*producer, *consumers] if n not in tensors]
    ragged_of: dict[str, list[str]] = {}
    for name in names:
        ragged = (tensors.get(name) or {}).get("ragged_offset")
        if ragged:
            ragged_of.setdefault(ragged, []).append(name)
    for j, name in enumerate(names):
        t = tensors.get(name) or {}
        text = tensor_text(name, t)
        src = producer.get(name)
        dsts = consumers.get(name, [])
        if ragged_of.get(name):  # a ragged offset table feeds the ops that read the tensors using it
            dsts = dsts + [(d, f"ragged offset of {user}") for user in ragged_of[name] for d, _ in
                           consumers.get(user, [])]
        if t.get("is_virtual") and src is not None and dsts:
            pic.edges.extend(Edge(src, dst, text, True) for dst, _ in dsts)
            continue
        if name in scratch:
            kind = "scratch"
        elif t.get("is_virtual"):
            kind = "virtual"
        elif t.get("is_pass_by_value") or t.get("pass_by_value") is not None:
            kind = "scalar"
        else:
            kind = "output" if src is not None else "input"
        box_id = f"t{j}"
        group = pic.boxes[src].group if kind == "scratch" and src is not None else ""
        pic.boxes[box_id] = Box(box_id, kind, text, group)
        if src is not None:
            pic.edges.append(Edge(src, box_id, [], False))
        for dst, port in dsts:
            pic.edges.append(Edge(box_id, dst, [port], False))
    return pic


def from_graph(graph: GraphView, expand: bool = False) -> Picture:
    """The picture of a live graph; with ``expand`` composites are drawn as the primitive
    nodes the expansion builds (the graph is validated and libcudnn loaded for its version)."""
    if not expand:
        # inferred dims and types make a better picture; a graph that does not validate is
        # still drawn (that is when a picture helps), with the reason as its caption
        note = ""
        try:
            graph.validate()
        except (ValueError, TypeError, NotImplementedError) as exc:  # GraphError is a ValueError
            note = f"does not validate: {str(exc).splitlines()[0]}"
        pic = build(graph.to_json(), {n.name for n in graph.nodes if _has_expansion(n)})
        pic.note = note
        return pic
    graph.validate()
    version = loader.report().version
    doc = graph.to_json()
    nodes: list[dict[str, Any]] = []
    tensors: dict[str, Any] = dict(doc["tensors"])
    groups: dict[str, str] = {}
    scratch: set[str] = set()
    for node in graph.nodes:
        parts, state = expand_nodes([node], graph.context, version)
        if len(parts) == 1 and parts[0] is node:
            nodes.append(node.to_json())
            continue
        groups[node.name] = f"{node.op} {node.name!r} (expanded)"
        nodes.extend({**_part_doc(part, tensors), "_group": node.name} for part in parts)
        for s in getattr(state, "scratch", state if isinstance(state, list) else []):
            scratch.add(s.tensor.get_name())
    doc = {**doc, "nodes": nodes, "tensors": tensors}
    return build(doc, set(), groups, scratch)


def _has_expansion(node: Node) -> bool:
    return type(node).expand is not Node.expand


def _part_doc(node: Node, tensors: dict[str, Any]) -> dict[str, Any]:
    """A part's JSON with its tensors added to ``tensors`` (a view keeps the name of the tensor
    it views, so it joins that tensor; an unnamed tensor is named after its port)."""
    doc = node.to_json()
    for side in ("inputs", "outputs"):
        ports: dict[str, Tensor] = getattr(node, side)
        doc[side] = {}
        for port, t in ports.items():
            name = t.get_name() or f"{node.name}::{port}"
            doc[side][port] = name
            tensors.setdefault(name, {**t.to_dict(), "name": name})
            ragged = t.get_ragged_offset()
            if ragged is not None and ragged.get_name():
                tensors.setdefault(ragged.get_name(), ragged.to_dict())
    return doc


def from_json_text(text: str, new_graph: Callable[[], Any], expand: bool = False) -> Picture:
    """The picture of a printed graph (``str(graph)``): rebuilt where cudnn-py can rebuild it
    (needed for ``expand``) into ``new_graph()`` (an empty ``pygraph``, which the caller
    names), else drawn as printed, saying so."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphError(f"picture: not a graph's JSON (what str(graph) prints): {exc}") from None
    g = new_graph()
    try:
        g.deserialize(text)
    except (ValueError, TypeError, KeyError) as exc:  # GraphError and SerializationError are ValueErrors
        if expand:
            raise GraphError(f"picture: cannot expand this graph: rebuilding it from its JSON failed: {exc}") from exc
        pic = build(doc)
        pic.note = f"drawn as printed ({str(exc).split(';')[0]})"
        return pic
    if (doc.get("context") or {}).get("name"):
        g.name = doc["context"]["name"]
    return from_graph(g, expand)


# -- layout -----------------------------------------------------------------------------------

CHAR_W, LINE_H, PAD, H_GAP, V_GAP, MARGIN = 7.2, 15.0, 8.0, 28.0, 62.0, 20.0


def layout(pic: Picture) -> None:
    """Each connected part of the graph laid out on its own (layers by longest path from the
    sources, barycentre ordering), the parts side by side."""
    if pic._laid_out:
        return
    for b in pic.boxes.values():
        b.w = max(len(line) for line in b.lines) * CHAR_W + 2 * PAD + (12 if STYLE[b.kind][2] == "pill" else 0)
        b.h = len(b.lines) * LINE_H + 2 * PAD
    preds: dict[str, list[str]] = {k: [] for k in pic.boxes}
    succs: dict[str, list[str]] = {k: [] for k in pic.boxes}
    for e in pic.edges:
        preds[e.dst].append(e.src)
        succs[e.src].append(e.dst)
    top = MARGIN + 20 + (16 if pic.note else 0) + 16  # the title, the note, room for a group caption
    x = MARGIN
    for part in _components(pic, preds, succs):
        x = _layout_part(pic, part, preds, succs, x, top) + 2 * H_GAP
    pic._laid_out = True


def _components(pic: Picture, preds: dict[str, list[str]], succs: dict[str, list[str]]) -> list[list[str]]:
    """The weakly connected parts, each in the boxes' order."""
    seen: set[str] = set()
    parts = []
    for k in pic.boxes:
        if k in seen:
            continue
        stack, part = [k], set()
        while stack:
            c = stack.pop()
            if c in part:
                continue
            part.add(c)
            stack += preds[c] + succs[c]
        seen |= part
        parts.append([b for b in pic.boxes if b in part])
    return parts


def _layout_part(pic: Picture, keys: list[str], preds: dict[str, list[str]], succs: dict[str, list[str]],
                 left: float, top: float) -> float:
    """Place the boxes of one connected part from ``left``; returns its right edge."""
    indeg = {k: len(preds[k]) for k in keys}
    ready = [k for k in keys if indeg[k] == 0]
    order: list[str] = []
    while ready:
        k = ready.pop(0)
        order.append(k)
        for s in succs[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    done = set(order)
    order += [k for k in keys if k not in done]  # a cycle (malformed JSON): drawn anyway
    placed: set[str] = set()
    for k in order:
        pic.boxes[k].layer = max((pic.boxes[p].layer + 1 for p in preds[k] if p in placed), default=0)
        placed.add(k)
    for k in order:  # an input sits right above its first consumer
        b = pic.boxes[k]
        if b.kind in ("input", "scalar") and succs[k]:
            b.layer = max(0, min(pic.boxes[s].layer for s in succs[k]) - 1)
    layers: dict[int, list[str]] = {}
    for k in order:
        layers.setdefault(pic.boxes[k].layer, []).append(k)
    levels = [layers[i] for i in sorted(layers)]
    for _ in range(4):
        for down in (True, False):
            for row in (levels[1:] if down else levels[-2::-1]):
                pos = {k: i for lvl in levels for i, k in enumerate(lvl)}
                near = preds if down else succs

                def centre(k: str, near: dict[str, list[str]] = near, pos: dict[str, int] = pos) -> float:
                    ns = [pos[n] for n in near[k] if n in pos]
                    return sum(ns) / len(ns) if ns else pos[k]

                row.sort(key=lambda k: (pic.boxes[k].group, centre(k)))
    widths = [sum(pic.boxes[k].w for k in row) + H_GAP * (len(row) - 1) for row in levels]
    total_w = max(widths, default=0.0)
    y = top
    for row, w in zip(levels, widths):
        x = left + (total_w - w) / 2
        height = max(pic.boxes[k].h for k in row)
        for k in row:
            b = pic.boxes[k]
            b.x, b.y = x, y + (height - b.h) / 2
            x += b.w + H_GAP
        y += height + V_GAP
    return left + total_w


# -- SVG --------------------------------------------------------------------------------------

def to_svg(pic: Picture) -> str:
    """A standalone SVG document (also what Jupyter shows through ``_repr_svg_``)."""
    layout(pic)
    uid = hashlib.blake2b(repr(sorted((b.id, tuple(b.lines)) for b in pic.boxes.values())).encode(),
                          digest_size=4).hexdigest()
    arrow = f"cudnn-arrow-{uid}"
    right = max((b.x + b.w for b in pic.boxes.values()), default=200.0) + MARGIN
    bottom = max((b.y + b.h for b in pic.boxes.values()), default=40.0) + MARGIN
    legend_y = bottom + 4
    legend_w = MARGIN + sum(32 + len(text) * 6.2 for _, text in LEGEND) + 130
    width, height = max(right, legend_w), legend_y + 24
    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="12">'),
           f"<title>{escape(pic.name)}</title>",
           (f'<defs><marker id="{arrow}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#5f6368"/></marker></defs>'),
           f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="white"/>',
           f'<text x="{MARGIN:.0f}" y="{MARGIN + 4:.0f}" font-size="14" font-weight="bold">{escape(pic.name)}</text>']
    if pic.note:
        out.append(f'<text x="{MARGIN:.0f}" y="{MARGIN + 22:.0f}" fill="#c5221f">{escape(pic.note)}</text>')
    for gid, caption in pic.groups.items():
        members = [b for b in pic.boxes.values() if b.group == gid]
        if not members:
            continue
        x0, y0 = min(b.x for b in members) - 10, min(b.y for b in members) - 22
        x1, y1 = max(b.x + b.w for b in members) + 10, max(b.y + b.h for b in members) + 10
        out.append(f'<g class="group" id={quoteattr("group-" + gid)}><rect x="{x0:.1f}" y="{y0:.1f}" '
                   f'width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" rx="8" fill="#fff8ef" fill-opacity="0.5" '
                   f'stroke="#e37400" stroke-dasharray="6 3"/><text x="{x0 + 6:.1f}" y="{y0 + 14:.1f}" '
                   f'fill="#b06000">{escape(caption)}</text></g>')
    out += _svg_edges(pic, arrow)
    for b in pic.boxes.values():
        out.append(_svg_box(b))
    x = MARGIN
    out.append('<g class="legend" font-size="10">')
    for kind, text in LEGEND:
        fill, stroke, shape = STYLE[kind]
        rx = 6 if shape == "pill" else 3
        out.append(f'<rect x="{x:.0f}" y="{legend_y:.0f}" width="14" height="12" rx="{rx}" fill="{fill}" '
                   f'stroke="{stroke}"/><text x="{x + 18:.0f}" y="{legend_y + 10:.0f}">{escape(text)}</text>')
        x += 18 + len(text) * 6.2 + 14
    out.append(f'<line x1="{x:.0f}" y1="{legend_y + 6:.0f}" x2="{x + 24:.0f}" y2="{legend_y + 6:.0f}" '
               'stroke="#5f6368" stroke-dasharray="4 3"/>'
               f'<text x="{x + 28:.0f}" y="{legend_y + 10:.0f}">virtual tensor</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def _svg_box(b: Box) -> str:
    fill, stroke, shape = STYLE[b.kind]
    rx = b.h / 2 if shape == "pill" else 6
    dash = ' stroke-dasharray="5 3"' if b.kind in ("scratch", "virtual") else ""
    parts = [(f'<g class={quoteattr("node " + b.kind)} id={quoteattr(b.id)}><title>{escape(" ".join(b.lines))}'
              f'</title><rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" rx="{rx:.1f}" '
              f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"{dash}/>')]
    if b.kind == "composite":  # a double outline: more inside than one op
        parts.append(f'<rect x="{b.x + 3:.1f}" y="{b.y + 3:.1f}" width="{b.w - 6:.1f}" height="{b.h - 6:.1f}" '
                     f'rx="4" fill="none" stroke="{stroke}"/>')
    cx = b.x + b.w / 2
    parts.append(f'<text x="{cx:.1f}" y="{b.y + PAD + 11:.1f}" text-anchor="middle">')
    for i, line in enumerate(b.lines):
        weight = ' font-weight="bold"' if i == 0 else ""
        parts.append(f'<tspan x="{cx:.1f}" dy="{0 if i == 0 else LINE_H:.0f}"{weight}>{escape(line)}</tspan>')
    parts.append("</text></g>")
    return "".join(parts)


def _svg_edges(pic: Picture, arrow: str) -> list[str]:
    """Curves from the bottom of the source to the top of the target, attach points spread
    along each side; labels on a white backing at the curve's middle."""
    outgoing: dict[str, list[Edge]] = {}
    incoming: dict[str, list[Edge]] = {}
    for e in pic.edges:
        outgoing.setdefault(e.src, []).append(e)
        incoming.setdefault(e.dst, []).append(e)
    for side in (*outgoing.values(), *incoming.values()):
        side.sort(key=lambda e: (pic.boxes[e.dst].x, pic.boxes[e.src].x))
    out = []
    labelled: set[tuple[str, tuple[str, ...]]] = set()  # a tensor read by several ops is labelled once
    for e in pic.edges:
        s, d = pic.boxes[e.src], pic.boxes[e.dst]
        i, n = outgoing[e.src].index(e), len(outgoing[e.src])
        j, m = incoming[e.dst].index(e), len(incoming[e.dst])
        x1, y1 = s.x + s.w * (i + 1) / (n + 1), s.y + s.h
        x2, y2 = d.x + d.w * (j + 1) / (m + 1), d.y
        if y2 <= y1:  # same layer or upwards (a cycle): go around
            y2 = d.y + d.h
        mid = (y1 + y2) / 2
        style = ' stroke-dasharray="6 4"' if e.virtual else ""
        cls = "edge virtual" if e.virtual else "edge"
        out.append(f'<g class="{cls}"><path d="M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} '
                   f'{x2:.1f},{y2:.1f}" fill="none" stroke="#5f6368" stroke-width="1.3"{style} '
                   f'marker-end="url(#{arrow})"/>')
        if e.label and (not e.virtual or (e.src, tuple(e.label)) not in labelled):
            labelled.add((e.src, tuple(e.label)))
            lx, ly = (x1 + x2) / 2, mid - (len(e.label) - 1) * 6
            w = max(len(t) for t in e.label) * 6.3 + 6
            out.append(f'<rect x="{lx - w / 2:.1f}" y="{ly - 10:.1f}" width="{w:.1f}" height="{len(e.label) * 13:.0f}" '
                       'fill="white" fill-opacity="0.85"/>')
            out.append(f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="10.5" text-anchor="middle" fill="#3c4043">')
            for k, line in enumerate(e.label):
                out.append(f'<tspan x="{lx:.1f}" dy="{0 if k == 0 else 13}">{escape(line)}</tspan>')
            out.append("</text>")
        out.append("</g>")
    return out


# -- DOT --------------------------------------------------------------------------------------

def _q(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(pic: Picture) -> str:
    """Graphviz DOT text: the same boxes, edges and groups (clusters) as the SVG."""
    caption = pic.name + (f"\n{pic.note}" if pic.note else "")
    lines = [f"digraph {_q(pic.name)} {{",
             f'  graph [rankdir=TB, fontname="monospace", fontsize=10, labelloc=t, label={_q(caption)}];',
             '  node [fontname="monospace", fontsize=10];',
             '  edge [fontname="monospace", fontsize=9, color="#5f6368"];']

    def node_line(b: Box, indent: str) -> str:
        fill, stroke, shape = STYLE[b.kind]
        style = "rounded,filled" + (",dashed" if b.kind in ("scratch", "virtual") else "")
        dot_shape = {"box": "box", "pill": "ellipse"}[shape] if b.kind != "composite" else "box"
        extra = ", peripheries=2" if b.kind == "composite" else ""
        return (f"{indent}{_q(b.id)} [shape={dot_shape}, style={_q(style)}, fillcolor={_q(fill)}, "
                f"color={_q(stroke)}{extra}, label={_q(chr(10).join(b.lines))}];")

    grouped: dict[str, list[Box]] = {}
    for b in pic.boxes.values():
        grouped.setdefault(b.group if b.group in pic.groups else "", []).append(b)
    lines.extend(node_line(b, "  ") for b in grouped.get("", []))
    for n, (gid, caption) in enumerate(pic.groups.items()):
        lines.append(f"  subgraph {_q(f'cluster_{n}')} {{")
        lines.append(f'    label={_q(caption)}; style="dashed,rounded"; color="#e37400";')
        lines += [node_line(b, "    ") for b in grouped.get(gid, [])]
        lines.append("  }")
    for e in pic.edges:
        attrs = [f"label={_q(chr(10).join(e.label))}"] if e.label else []
        if e.virtual:
            attrs.append('style="dashed"')
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"  {_q(e.src)} -> {_q(e.dst)}{suffix};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def save(pic: Picture, path: str | Path) -> Path:
    """Write the picture as SVG (``.svg``) or DOT (``.dot`` / ``.gv``), chosen by the suffix."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".svg":
        text = to_svg(pic)
    elif suffix in (".dot", ".gv"):
        text = to_dot(pic)
    else:
        raise GraphError(f"save_picture: {str(path)!r}: expected a .svg, .dot or .gv file name, got suffix "
                         f"{suffix or '(none)'!r}")
    path.write_text(text, encoding="utf-8")
    return path


def labels_of(pic: Picture) -> Sequence[str]:
    """Every text line drawn (boxes and edge labels): what tests look for names in."""
    return [line for b in pic.boxes.values() for line in b.lines] + [line for e in pic.edges for line in e.label]
