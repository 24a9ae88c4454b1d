"""Graph pictures on CPU: SVG that parses, DOT that is well formed, every node and tensor drawn,
composites collapsed or expanded, printed graphs drawn by `python -m cudnn show`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import cudnn
from cudnn._graph.text import diagram as picture

SRC = str(Path(__file__).resolve().parents[2] / "src")
SVG = "{http://www.w3.org/2000/svg}"
HALF, FLOAT = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def conv_bias_relu() -> cudnn.pygraph:
    g = cudnn.pygraph(name="cbr", io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    X = g.tensor(name="X", dim=[4, 32, 28, 28], stride=[25088, 1, 896, 32])
    W = g.tensor(name="W", dim=[64, 32, 3, 3], stride=[288, 1, 96, 32])
    B = g.tensor(name="B", dim=[1, 64, 1, 1], stride=[64, 1, 64, 64])
    g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1], name="conv"), B, name="bias"), name="relu").set_output(True)
    return g


def attention_and_norm() -> cudnn.pygraph:
    g = cudnn.pygraph(name="attn_ln", io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    q, k, v = (g.tensor(name=n, dim=[2, 4, 128, 64]) for n in ("q", "k", "v"))
    o, stats = g.sdpa(q, k, v, generate_stats=True, attn_scale=0.125, use_causal_mask=True, name="attn")
    o.set_output(True)
    stats.set_output(True).set_data_type(FLOAT)
    x = g.tensor(name="x", dim=[8, 1024, 1, 1], stride=[1024, 1, 1024, 1024])
    scale, bias = (g.tensor(name=n, dim=[1, 1024, 1, 1], stride=[1024, 1, 1024, 1024], data_type=FLOAT)
                   for n in ("scale", "bias"))
    for t in g.layernorm(cudnn.norm_forward_phase.TRAINING, x, scale, bias, 1e-5, name="ln",
                         zero_centered_gamma=True):
        t.set_output(True)
    return g


def svg_texts(svg: str) -> tuple[ET.Element, list[str]]:
    root = ET.fromstring(svg)  # raises on malformed XML
    assert root.tag == f"{SVG}svg"
    lines = ["".join(t.itertext()) for t in root.iter(f"{SVG}tspan")]
    return root, lines


def names_of(g: cudnn.pygraph) -> tuple[list[str], list[str]]:
    doc = json.loads(str(g))
    return [n["name"] for n in doc["nodes"]], list(doc["tensors"])


def parse_dot(text: str) -> tuple[dict[str, dict[str, str]], list[tuple[str, str, dict[str, str]]]]:
    """A small structural reader of the DOT cudnn-py writes: every line a header, a default
    attribute list, a node, an edge, a cluster opening or a closing brace, braces balanced;
    returns nodes (id -> attributes) and edges."""
    quoted = r'"(?:[^"\\]|\\.)*"'
    attrs = rf'\[((?:\s*\w+=(?:{quoted}|[\w.]+),?)*)\]'
    node_re = re.compile(rf"^\s*({quoted})\s*{attrs};$")
    edge_re = re.compile(rf"^\s*({quoted})\s*->\s*({quoted})(?:\s*{attrs})?;$")
    kv_re = re.compile(rf'(\w+)=({quoted}|[\w.]+)')

    def unq(s: str) -> str:
        return s[1:-1].replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\") if s.startswith('"') else s

    lines = text.strip().splitlines()
    assert re.match(rf"^digraph {quoted} \{{$", lines[0]) and lines[-1] == "}"
    depth, nodes, edges = 0, {}, []
    for line in lines:
        depth += line.count("{") - line.count("}") if not ('"' in line and "label=" in line) else 0
        if m := edge_re.match(line):
            edges.append((unq(m[1]), unq(m[2]), {k: unq(v) for k, v in kv_re.findall(m[3] or "")}))
        elif m := node_re.match(line):
            nodes[unq(m[1])] = {k: unq(v) for k, v in kv_re.findall(m[2])}
        else:
            assert re.match(rf"^(digraph {quoted} \{{|\s*(graph|node|edge) \[.*\];|\s*subgraph {quoted} \{{|"
                            rf"\s*label=.*;|\s*\}})$", line), f"unexpected DOT line: {line!r}"
    assert depth == 0, "unbalanced braces"
    for src, dst, _ in edges:
        assert src in nodes and dst in nodes, f"edge {src} -> {dst} names an undeclared node"
    return nodes, edges


@pytest.mark.parametrize("make", [conv_bias_relu, attention_and_norm])
def test_svg_is_valid_and_draws_every_node_and_tensor(make) -> None:  # type: ignore[no-untyped-def]
    g = make()
    root, lines = svg_texts(g._repr_svg_())
    node_names, tensor_names = names_of(g)  # _repr_svg_ validated: inferred tensors are named
    for name in node_names + tensor_names:
        assert name in lines, f"{name!r} is not drawn"
    boxes = [e for e in root.iter(f"{SVG}g") if "node" in (e.get("class") or "").split()]
    assert len([b for b in boxes if b.get("class") in ("node op", "node composite")]) == len(node_names)


def test_virtual_tensors_are_dashed_edges_with_dims_and_type_and_io_tensors_are_boxes() -> None:
    g = conv_bias_relu()
    root, lines = svg_texts(g._repr_svg_())
    virtual = [e for e in root.iter(f"{SVG}g") if e.get("class") == "edge virtual"]
    assert len(virtual) == 2 and all(e.find(f"{SVG}path").get("stroke-dasharray") for e in virtual)
    labels = [["".join(t.itertext()) for t in e.iter(f"{SVG}tspan")] for e in virtual]
    assert ["conv::Y", "[4,64,28,28] FLOAT"] in labels and ["bias::OUT_0", "[4,64,28,28] FLOAT"] in labels
    kinds = {e.get("id"): e.get("class") for e in root.iter(f"{SVG}g") if e.get("class", "").startswith("node")}
    assert sorted(kinds.values()) == ["node input"] * 3 + ["node op"] * 3 + ["node output"]
    assert "[4,32,28,28] HALF" in lines  # the input box shows dims and type


def test_composites_are_collapsed_by_default_and_expanded_on_request() -> None:
    g = attention_and_norm()
    collapsed = picture.from_graph(g)
    assert sorted(b.kind for b in collapsed.boxes.values() if b.kind in ("op", "composite")) == ["composite"] * 2
    assert not collapsed.groups
    expanded = picture.from_graph(g, expand=True)
    ops = [b for b in expanded.boxes.values() if b.kind == "op"]
    assert len(ops) > 10 and {b.group for b in ops} == {"attn", "ln"}
    assert set(expanded.groups) == {"attn", "ln"}
    drawn = picture.labels_of(expanded)
    for name in ("attn.bmm1", "attn.bmm2", "ln.scale_plus_one", "q", "k", "v", "attn::O", "ln::Y"):
        assert name in drawn
    root, _ = svg_texts(expanded.svg())
    assert len([e for e in root.iter(f"{SVG}g") if e.get("class") == "group"]) == 2
    nodes, _ = parse_dot(g.to_dot(expand=True))
    assert len(nodes) == len(expanded.boxes)
    # the expansion drawn is the one the graph builds: validating and expanding again agrees
    assert len(picture.from_graph(g, expand=True).boxes) == len(expanded.boxes)


def test_dot_is_well_formed_and_has_every_node_and_tensor() -> None:
    g = conv_bias_relu()
    nodes, edges = parse_dot(g.to_dot())
    node_names, tensor_names = names_of(g)
    labels = [a.get("label", "") for a in nodes.values()] + [a.get("label", "") for _, _, a in edges]
    text = "\n".join(labels)
    for name in node_names + tensor_names:
        assert name in text.split("\n"), name
    assert sum(1 for _, _, a in edges if a.get("style") == "dashed") == 2
    assert len(edges) == 6


def test_names_that_need_escaping() -> None:
    g = cudnn.pygraph(name='a "quoted" <graph> & co', io_data_type=FLOAT)
    x = g.tensor(name='x<"&>\\', dim=[2, 3])
    g.relu(x, name="r&<>").set_output(True).set_name("y")
    _, lines = svg_texts(g._repr_svg_())
    assert 'x<"&>\\' in lines and "r&<>" in lines
    nodes, _ = parse_dot(g.to_dot())
    assert any(a["label"].startswith("r&<>") for a in nodes.values())


def test_a_graph_that_does_not_validate_is_drawn_with_the_reason() -> None:
    g = cudnn.pygraph(io_data_type=FLOAT)
    x = g.tensor(name="x", dim=[2, 3])
    g.relu(x, name="r")  # output neither used nor marked as one
    pic = picture.from_graph(g)
    assert "does not validate" in pic.note and "set_output" in pic.note
    root, _ = svg_texts(pic.svg())
    assert any("does not validate" in "".join(t.itertext()) for t in root.iter(f"{SVG}text"))


def test_save_picture_by_suffix(tmp_path: Path) -> None:
    g = conv_bias_relu()
    assert g.save_picture(str(tmp_path / "g.svg")) == str(tmp_path / "g.svg")
    svg_texts((tmp_path / "g.svg").read_text())
    g.save_picture(tmp_path / "g.dot")  # type: ignore[arg-type]
    parse_dot((tmp_path / "g.dot").read_text())
    with pytest.raises(cudnn.GraphError, match=r"expected a \.svg, \.dot or \.gv"):
        g.save_picture(str(tmp_path / "g.png"))


def run_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "cudnn", *args], capture_output=True, text=True, env=env,
                          input=stdin, timeout=120, check=False)


def test_show_draws_a_printed_graph(tmp_path: Path) -> None:
    g = conv_bias_relu()
    g.validate()
    (tmp_path / "g.json").write_text(str(g))
    out = run_cli("show", str(tmp_path / "g.json"), "-o", str(tmp_path / "g.svg"))
    assert out.returncode == 0, out.stderr
    _, lines = svg_texts((tmp_path / "g.svg").read_text())
    node_names, tensor_names = names_of(g)
    assert set(node_names + tensor_names) <= set(lines)
    dot = run_cli("show", "-", stdin=str(g))
    assert dot.returncode == 0, dot.stderr
    parse_dot(dot.stdout)


def test_show_draws_what_it_cannot_rebuild_as_printed_and_refuses_to_expand_it(tmp_path: Path) -> None:
    """An attention node with a score_mod callable (which its JSON cannot hold) is drawn as printed."""
    g = cudnn.pygraph(name="soft_cap", io_data_type=HALF, intermediate_data_type=FLOAT, compute_data_type=FLOAT)
    q, k, v = (g.tensor(name=n, dim=[2, 4, 128, 64]) for n in ("q", "k", "v"))
    o, _ = g.sdpa(q, k, v, is_inference=True, name="attn", score_mod=lambda sub, s: sub.mul(s, 0.5))
    o.set_output(True)
    g.validate()
    (tmp_path / "a.json").write_text(str(g))
    out = run_cli("show", str(tmp_path / "a.json"), "-o", str(tmp_path / "a.svg"))
    assert out.returncode == 0, out.stderr
    _, lines = svg_texts((tmp_path / "a.svg").read_text())
    assert {"attn", "q", "attn::O"} <= set(lines)
    refused = run_cli("show", str(tmp_path / "a.json"), "--expand", "-o", str(tmp_path / "b.svg"))
    assert refused.returncode == 2 and "cannot expand this graph" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_show_expands_a_printed_attention_graph(tmp_path: Path) -> None:
    g = attention_and_norm()
    g.validate()
    (tmp_path / "a.json").write_text(str(g))
    out = run_cli("show", str(tmp_path / "a.json"), "--expand", "-o", str(tmp_path / "a.svg"))
    assert out.returncode == 0, out.stderr
    _, lines = svg_texts((tmp_path / "a.svg").read_text())
    assert {"q", "attn::O", "ln::MEAN", "attn::bmm1", "attn::select_right"} <= set(lines)  # the causal band too


def test_show_bad_input_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    missing = run_cli("show", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    bad = run_cli("show", "-", stdin="{not json")
    assert bad.returncode == 2 and "not a graph's JSON" in bad.stderr
    for out in (missing, bad):
        assert "Traceback" not in out.stderr
