"""Topology: xc_core.layout (preparation, alignment) and xc_core.topology (module hierarchy, expansion, Graphviz
drawing) on small graphs built in code, and the Topology page through AppTest for every bundled sample."""
import json
import os
import sys

import pytest

import re

from xc_core.views import graph_layout as topo
from xc_core.views import topology
from xc_core.analysis.alignment import source_op_table
from xc_core.ir import Graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUTER = os.path.join(ROOT, "tests", "apps", "topology_app.py")
PAGE = os.path.join(ROOT, "pages", "topology.py")
SAMPLES = ["vision-mini", "tts-mini", "transformer-mini"]


# ----------------------------------------------------------------------------------------------- graph helpers

def node(nid, ins, outs=None, *, op="Op", kind="compute", module="", backend="cpu", source_ops=None,
         fused_from=None, fallback=False, reason=None, precision="fp32"):
    return {"id": nid, "op_type": op, "domain": "", "kind": kind,
            "inputs": [{"name": i, "shape": [1, 4], "dtype": "float32"} for i in ins],
            "outputs": [{"name": o, "shape": [1, 4], "dtype": "float32"} for o in (outs or [nid])],
            "attributes": {}, "backend": backend, "kernel": None, "precision": precision,
            "source_ops": [nid] if source_ops is None else source_ops, "module_path": module,
            "source_location": None, "fused_from": fused_from or [], "fallback": fallback,
            "fallback_reason": reason}


def graph(nodes, name="g"):
    return {"name": name, "stage": "optimized", "inputs": [], "outputs": [], "nodes": nodes}


def diamond_with_skip():
    """x → a → {b, c} → d → e, plus a long edge a → e and a constant feeding b."""
    return graph([
        node("x", ["in"], kind="io", source_ops=[]),
        node("w", [], kind="constant", source_ops=[]),
        node("a", ["x"], module="m.0"),
        node("b", ["a", "w"], module="m.0"),
        node("c", ["a"], module="m.1"),
        node("d", ["b", "c"], module="m.1"),
        node("t", ["d"], op="Transpose", kind="layout", module=None, source_ops=[]),
        node("e", ["t", "a"], module="n"),
    ])


# --------------------------------------------------------------------------------------------------- layering

def test_prepare_drops_constants_and_io_keeps_layout_and_bridges_edges():
    p = topo.prepare(diamond_with_skip())
    assert p.ids == ["a", "b", "c", "d", "t", "e"]
    edges = {(p.ids[i], p.ids[j]) for i, j in p.edges}
    assert edges == {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "t"), ("t", "e"), ("a", "e")}


def test_bridges_through_a_dropped_node():
    g = graph([node("a", ["in"]), node("out", ["a"], kind="io", source_ops=[]), node("b", ["out"])])
    p = topo.prepare(g)
    assert [(p.ids[i], p.ids[j]) for i, j in p.edges] == [("a", "b")]


def test_unknown_module_path_is_inferred_from_neighbours():
    g = graph([node("a", ["in"], module="enc.attn"), node("t", ["a"], kind="layout", module=None, source_ops=[]),
               node("b", ["t"], module="enc.attn.proj")])
    p = topo.prepare(g)
    assert p.modules == ["enc.attn", "enc.attn", "enc.attn.proj"] and p.inferred == [False, True, False]
    v = topology.view(topology.build_tree(p), set())
    assert v["n_boxes"] == 1 and v["boxes"][0]["nodes"] == 3        # the reorder does not split the group box


# ------------------------------------------------------------------------------------------------------ flags

def two_targets():
    """Source a → b → c → d. Target X fuses b+c and falls d back; target Y drops c and inserts a cast."""
    src = graph([node(s, [p]) for s, p in (("a", "in"), ("b", "a"), ("c", "b"), ("d", "c"))], "src")
    x = graph([
        node("xa", ["in"], source_ops=["a"], fused_from=["a"], backend="nnapi"),
        node("xbc", ["xa"], op="FusedBC", source_ops=["b", "c"], fused_from=["b", "c"], backend="nnapi"),
        node("xd", ["xbc"], source_ops=["d"], fused_from=["d"], fallback=True, reason="D unsupported"),
    ], "x")
    y = graph([
        node("ya", ["in"], source_ops=["a"], module="m"),
        node("cast", ["ya"], op="Cast", kind="cast", source_ops=[], module=None),
        node("yb", ["cast"], source_ops=["b"], module="m"),
        node("yd", ["yb"], source_ops=["d"], module="m"),
    ], "y")
    rows = source_op_table(Graph.from_dict(src), {"x": Graph.from_dict(x), "y": Graph.from_dict(y)})
    return src, x, y, rows


def test_fallback_fused_and_counterpart_flags():
    src, x, y, rows = two_targets()
    aidx = topo.index_alignment(rows)
    assert aidx["status"]["y"]["c"] == "absent"
    px, py = topo.prepare(x), topo.prepare(y)
    lx = {b["id"]: b for b in _view(px)["boxes"]}
    assert lx["xd"]["fallback"] and lx["xd"]["fallback_reason"] == "D unsupported"
    assert lx["xbc"]["absorbed"] == ["b", "c"] and lx["xbc"]["source_ops"] == ["b", "c"] and not lx["xa"]["fused"]
    # Fusion groups from the report win over fused_from when given.
    px2 = topo.prepare(x, {"groups": [{"node": "xa", "pattern": "A+A → A", "absorbed": [{"id": "a"}, {"id": "a2"}]}]})
    lx2 = {b["id"]: b for b in _view(px2)["boxes"]}
    assert lx2["xa"]["fused"] == "A+A" and lx2["xa"]["absorbed"] == ["a", "a2"] and not lx2["xbc"]["fused"]

    gx = topo.counterpart_gaps(px, "x", aidx, ["x", "y"])
    gy = topo.counterpart_gaps(py, "y", aidx, ["x", "y"])
    assert gx == {}                                    # xbc still has b on y: not all of its ops are absent
    assert set(gy) == {"cast"} and "no source op" in gy["cast"]
    x_only = graph([node("xc", ["in"], source_ops=["c"])])
    assert "absent on y" in topo.counterpart_gaps(topo.prepare(x_only), "x", aidx, ["x", "y"])["xc"]
    # Counterparts through the alignment.
    assert topo.nodes_for_source_ops(aidx, "x", ["c"]) == {"xbc"}
    assert topo.nodes_for_source_ops(aidx, "y", ["c"]) == set()
    assert topo.nodes_for_source_ops(aidx, "y", ["b"]) == {"yb"}


def test_alignment_rows_computed_when_report_has_none():
    src, x, y, rows = two_targets()
    report = {"capture": {"graph": src}, "targets": {"x": {"graph": x}, "y": {"graph": y}}}
    assert topo.alignment_rows(report) == rows
    assert topo.alignment_rows({**report, "alignment": {"source_ops": rows[:1]}}) == rows[:1]


def _view(prep, expanded=None):
    tree = topology.build_tree(prep)
    return topology.view(tree, topology.auto_expand(tree, 1000) if expanded is None else expanded)


# --------------------------------------------------------------------------------------------- hierarchy

def modular_graph():
    """Two blocks of a chain, each with two layers of three ops, a residual edge per block, head at the root."""
    nodes, prev = [], "in"
    for i in range(2):
        block_in = prev
        for j in range(2):
            for k in range(3):
                nid = f"b{i}l{j}o{k}"
                nodes.append(node(nid, [prev], module=f"blocks.{i}.layer.{j}"))
                prev = nid
        nid = f"b{i}res"
        nodes.append(node(nid, [prev] + ([block_in] if block_in != "in" else []), op="Add", module=f"blocks.{i}"))
        prev = nid
    nodes.append(node("head", [prev], module=""))
    return graph(nodes)


def test_collapsed_groups_keep_edges_between_them_and_say_what_they_hide():
    g = modular_graph()
    g["nodes"][1]["fallback"], g["nodes"][1]["fallback_reason"] = True, "unsupported"
    g["nodes"][2]["precision"] = "fp16"
    tree = topology.build_tree(topo.prepare(g))
    v = topology.view(tree, {"blocks"})
    keys = {b["key"]: b for b in v["boxes"]}
    assert set(keys) == {"g:blocks.0", "g:blocks.1", "n:head"}
    b0 = keys["g:blocks.0"]
    assert (b0["nodes"], b0["fallback"], b0["precisions"]) == (7, 1, {"fp32": 6, "fp16": 1})
    pairs = {(v["boxes"][e["source"]]["key"], v["boxes"][e["target"]]["key"]): e["count"] for e in v["edges"]}
    # blocks.0 → blocks.1 stands for two node edges (the chain and the residual into b1res); no self-loops.
    assert pairs == {("g:blocks.0", "g:blocks.1"): 2, ("g:blocks.1", "n:head"): 1}
    assert [c["path"] for c in v["clusters"]] == ["blocks"]
    dot = topology.to_dot(v)
    assert "7 nodes" in dot and "1 on CPU" in dot and "fp32 6 · fp16 1" in dot
    json.dumps(v)                                      # plain, serialisable data


def test_auto_expand_opens_the_most_detail_within_budget():
    tree = topology.build_tree(topo.prepare(modular_graph()))
    assert topology.auto_expand(tree, 100) == {"blocks", "blocks.0", "blocks.1", "blocks.0.layer", "blocks.1.layer",
                                              "blocks.0.layer.0", "blocks.0.layer.1", "blocks.1.layer.0",
                                              "blocks.1.layer.1"}
    for budget in (2, 3, 5, 8):
        assert topology.view(tree, topology.auto_expand(tree, budget))["n_boxes"] <= budget
    assert topology.view(tree, set())["n_boxes"] == 2      # the root's group and head
    # Opening the groups that hide a node (search), within the cap.
    opened = topology.expansion_for(tree, [tree.prep.index["b1l1o2"]], set())
    assert {"blocks", "blocks.1", "blocks.1.layer", "blocks.1.layer.1"} <= opened
    assert "blocks.0" not in opened
    assert topology.expansion_for(tree, [tree.prep.index["b1l1o2"]], set(), cap=3) == set()


def test_flat_graphs_get_a_hierarchy_from_name_scopes_or_the_node_order():
    named = graph([node(f"/model.{i // 10}/conv/Conv_{i}", [f"/model.{(i - 1) // 10}/conv/Conv_{i - 1}"
                                                            if i else "in"], module=None) for i in range(60)])
    tree = topology.build_tree(topo.prepare(named))
    assert tree.synthesized == "names" and tree.size["model.3.conv"] == 10
    assert "model.3" not in tree.size            # a group holding only one group is merged into it
    flat = graph([node(f"n{i}", [f"n{i - 1}" if i else "in"], module=None) for i in range(1000)])
    tree = topology.build_tree(topo.prepare(flat))
    assert tree.synthesized == "sequence"
    top = tree.children[""]
    assert top[0] == "ops 1–576" and tree.size[top[0]] == 576 and sum(tree.size[c] for c in top) == 1000
    v = topology.view(tree, topology.auto_expand(tree))
    assert 2 < v["n_boxes"] <= topology.DEFAULT_BUDGET
    small = graph([node(f"n{i}", [f"n{i - 1}" if i else "in"], module=None) for i in range(20)])
    assert topology.build_tree(topo.prepare(small)).synthesized is None     # fits: nothing to group


def test_svg_boxes_carry_op_attributes_backend_and_edges_carry_shapes():
    g = graph([node("conv", ["in"], op="Conv", backend="nnapi"), node("relu", ["conv"], op="Relu", backend="cpu",
                                                                        fallback=True, reason="no kernel")])
    g["nodes"][0]["attributes"] = {"kernel_shape": [3, 3], "strides": [2, 2], "group": 4, "dilations": [1, 1]}
    g["nodes"][0]["outputs"][0]["shape"] = [1, 16, 32, 32]
    g["nodes"][1]["inputs"][0]["shape"] = [1, 16, 32, 32]
    g["nodes"][0]["fused_from"] = ["c", "bn"]
    v = _view(topo.prepare(g))
    svg = topology.render_svg(v)
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert "Conv" in texts and "k3×3 s2×2 g4" in texts and "nnapi · fp32" in texts and "Relu" in texts
    assert "1×16×32×32" in texts                                   # the edge's tensor shape
    edge = re.search(r'<g id="edge\d+" class="edge">(.*?)</g>', svg, re.S).group(1)
    assert "<polygon" in edge                                      # an arrowhead
    # The fallback box has the red border, and each box's hover says what it is.
    assert topo.FALLBACK_COLOR.lower() in re.search(r'<g id="b1" class="node">(.*?)</g>', svg, re.S).group(1).lower()
    assert "falls back to the CPU: no kernel" in svg and "fused: " in svg
    marked = topology.mark(svg, {"gap": [1]})
    assert '<g id="b1" class="node gap">' in marked and '<g id="b0" class="node">' in marked


def test_a_module_path_thousands_deep_does_not_recurse():
    deep = ".".join(f"m{k}" for k in range(3000))
    g = graph([node("a", ["in"], module=deep), node("b", ["a"], module=deep), node("c", ["b"], module="")])
    tree = topology.build_tree(topo.prepare(g))
    v = topology.view(tree, topology.auto_expand(tree))
    assert v["n_boxes"] == 3 and len(v["clusters"]) == 1      # the 3000-deep chain is one group
    assert "<svg" in topology.render_svg(v)


def test_model_strings_are_escaped_in_the_drawing():
    g = graph([node('<script>alert("x")</script>', ["in"], op="<b>Op&", module="m<1>")])
    svg = topology.render_svg(_view(topo.prepare(g)))
    assert "<script>" not in svg and "<b>Op" not in svg
    assert "&lt;b&gt;Op&amp;" in svg


def test_a_20k_node_report_draws_collapsed_within_budget():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from topology_bench import synthetic_report
    report = synthetic_report(3000)
    trees = [topology.build_tree(topo.prepare(t["graph"], t["fusions"])) for t in report["targets"].values()]
    assert min(len(tr.prep.ids) for tr in trees) > 2000
    expanded = topology.auto_expand(max(trees, key=lambda tr: len(tr.prep.ids)))
    for tr in trees:
        v = topology.view(tr, expanded)
        assert v["n_boxes"] <= topology.DEFAULT_BUDGET and any(b["kind"] == "group" for b in v["boxes"])


# ------------------------------------------------------------------------------------------------------- page

def _panes(at) -> list[dict]:
    return [json.loads(el.proto.json) for el in at.get("bidi_component")]


def run_router(sample: str):
    from apptest_wait import until_report
    from streamlit.testing.v1 import AppTest
    def make():
        at = AppTest.from_file(ROUTER, default_timeout=900)
        at.session_state["sample"] = sample
        return at
    at = until_report(make)
    assert not at.exception, at.exception
    return at


@pytest.mark.slow      # ~30 s per sample: the page analyses the sample on every target first
@pytest.mark.parametrize("sample", SAMPLES)
def test_topology_page_renders_and_selects(sample):
    at = run_router(sample)
    assert at.title[0].value == "Topology"
    targets = at.multiselect(key="topo_targets").value
    assert len(targets) == 2
    panes = _panes(at)
    assert len(panes) == 2
    for p in panes:
        texts = re.findall(r"<text[^>]*>([^<]*)</text>", p["svg"])
        assert any("×" in t for t in texts)                       # edge shapes
        assert len(p["items"]) >= 5 and len(texts) > len(p["items"])
    # Keyboard-free selection: a source op carried by both panes.
    ops = [o.split(" · ")[0] for o in at.selectbox(key="topo_source_op").options if o != "—"]
    assert ops
    at.selectbox(key="topo_source_op").set_value(ops[len(ops) // 2]).run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert set(table["target"]) == set(targets)
    assert {"node", "op_type", "backend", "precision", "fused with", "status"} <= set(table.columns)
    assert set(table["status"]) <= {"present", "fused", "fallback", "absent"}
    present = set(table[table["status"] != "absent"]["target"])
    for tid, p in zip(targets, _panes(at)):
        assert bool(p["selected"]) == (tid in present), tid
    # Collapse, search, auto, and a third target.
    at.button(key="topo_collapse").click().run()
    assert not at.exception, at.exception
    collapsed = _panes(at)
    assert all(len(p["items"]) < len(q["items"]) for p, q in zip(collapsed, panes))
    at.text_input(key="topo_find").set_value(ops[0]).run()
    assert not at.exception, at.exception
    assert any(p["matches"] for p in _panes(at))
    at.button(key="topo_auto").click().run()
    options = at.multiselect(key="topo_targets").options
    at.multiselect(key="topo_targets").set_value(options[:3]).run()
    assert not at.exception, at.exception
    assert len(_panes(at)) == 3
    at.button(key="topo_clear").click().run()
    assert not at.exception, at.exception
    assert not at.dataframe


def test_topology_page_selection_from_a_pane():
    """A click in a pane stores its nodes and source ops; the other panes then show the counterparts. Also: a
    compiler-inserted node explains it has no counterpart."""
    at = run_router("tts-mini")
    report = at.session_state["report"]
    tid = at.multiselect(key="topo_targets").value[0]
    nodes = report["targets"][tid]["graph"]["nodes"]
    fused = next(n for n in nodes if len(n["source_ops"]) > 1)
    at.session_state["topo_sel"] = {"ops": fused["source_ops"], "origin": tid, "nodes": [fused["id"]],
                                    "label": fused["id"]}
    at.run()
    assert not at.exception, at.exception
    assert len(at.dataframe[0].value) == 2 * len(fused["source_ops"])
    inserted = [n for n in nodes if not n["source_ops"] and n["kind"] not in ("constant", "io")]
    if inserted:
        at.session_state["topo_sel"] = {"ops": [], "origin": tid, "nodes": [inserted[0]["id"]],
                                        "label": inserted[0]["id"]}
        at.run()
        assert not at.exception, at.exception
        assert "carries no source op" in at.info[0].value


def test_topology_page_on_a_large_synthetic_report():
    """The page on a ~3000-node synthetic report (no compiler run): collapsed by default, within budget."""
    from streamlit.testing.v1 import AppTest

    def app(root, page):
        import sys as _sys
        _sys.path[:0] = [root, root + "/bench"]
        import streamlit as st
        from topology_bench import synthetic_report
        if "report" not in st.session_state:
            st.session_state["report"] = synthetic_report(3000)
        st.session_state["_xc_routed"] = True   # this router stands in for app.py's sidebar
        st.navigation([st.Page(page, default=True)]).run()

    at = AppTest.from_function(app, args=(ROOT, PAGE), default_timeout=300)
    at.run()
    assert not at.exception, at.exception
    panes = _panes(at)
    assert len(panes) == 2 and all(len(p["items"]) <= topology.DEFAULT_BUDGET for p in panes)
    at.selectbox(key="topo_op_module").set_value("blocks.0.layer.0.attn").run()   # > 1000 ops: module first
    assert not at.exception, at.exception
    assert "matmul_16" in [o.split(" · ")[0] for o in at.selectbox(key="topo_source_op").options]
    at.selectbox(key="topo_source_op").set_value("matmul_16").run()
    assert not at.exception, at.exception
    assert set(at.dataframe[0].value["status"]) <= {"present", "fused", "fallback", "absent"}
    assert all(p["selected"] for p in _panes(at))                  # the group hiding it is ringed
    # Opening every group would draw thousands of boxes: refused with a warning, the last drawing kept.
    report = at.session_state["report"]
    tree = topology.build_tree(topo.prepare(report["targets"]["ort-nnapi"]["graph"]))
    state = at.session_state["topo_expanded"]
    before = [len(p["items"]) for p in _panes(at)]
    at.session_state["topo_expanded"] = {"report": state["report"], "paths": [p for p in tree.size if p]}
    at.run()
    assert not at.exception, at.exception
    assert any("more than 400 boxes" in w.value for w in at.warning)
    assert [len(p["items"]) for p in _panes(at)] == before
