"""Topology view: xc_core.layout on small graphs built in code (Sugiyama layering, collapse/expand, flags, figure),
and the Topology page through AppTest for every bundled sample."""
import json
import os
import sys

import pytest

from xc_core import layout as topo
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


def test_sugiyama_layers_point_down_and_long_edges_get_control_points():
    p = topo.prepare(diamond_with_skip())
    lay = topo.layout(p, None)
    y = {b["id"]: b["y"] for b in lay["boxes"]}
    for e in lay["edges"]:
        assert lay["boxes"][e["source"]]["y"] < lay["boxes"][e["target"]]["y"]
        ys = [pt[1] for pt in e["points"]]
        assert ys == sorted(ys)                       # the polyline itself descends
    assert y["a"] == 0 and y["e"] == max(y.values())
    long_edge = next(e for e in lay["edges"] if (lay["boxes"][e["source"]]["id"], lay["boxes"][e["target"]]["id"])
                     == ("a", "e"))
    assert len(long_edge["points"]) == 2 + (y["e"] - y["a"] - 1)   # one control point per skipped layer
    json.dumps(lay)                                   # plain, serialisable data


def test_layering_on_a_larger_random_dag():
    import random
    rnd = random.Random(7)
    nodes = [node("n0", ["in"])]
    for k in range(1, 120):
        preds = rnd.sample(range(k), min(k, rnd.randint(1, 3)))
        nodes.append(node(f"n{k}", [f"n{i}" for i in preds], module=f"blk.{k // 10}"))
    p = topo.prepare(graph(nodes))
    for depth in (None, 1, 2):
        lay = topo.layout(p, depth)
        for e in lay["edges"]:
            assert lay["boxes"][e["source"]]["y"] < lay["boxes"][e["target"]]["y"], depth


def test_cycles_do_not_crash():
    g = graph([node("a", ["c"]), node("b", ["a"]), node("c", ["b"])])
    lay = topo.layout(topo.prepare(g))
    assert lay["n_boxes"] == 3 and len(lay["edges"]) == 3


# --------------------------------------------------------------------------------------------------- collapse

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


def test_collapse_reduces_boxes_and_keeps_edges_between_modules():
    p = topo.prepare(modular_graph())
    assert len(p.ids) == 15 and p.max_depth == 4
    full = topo.layout(p, None)
    d2 = topo.layout(p, 2)
    assert d2["n_boxes"] < full["n_boxes"]
    labels = {b["key"]: b for b in d2["boxes"]}
    assert set(labels) == {"m:blocks.0", "m:blocks.1", "n:head"}
    assert labels["m:blocks.0"]["count"] == 7 and labels["m:blocks.0"]["kind"] == "module"
    pairs = {(d2["boxes"][e["source"]]["key"], d2["boxes"][e["target"]]["key"]): e["count"] for e in d2["edges"]}
    # blocks.0 → blocks.1 stands for two node edges (the chain and the residual into b1res); no self-loops.
    assert pairs == {("m:blocks.0", "m:blocks.1"): 2, ("m:blocks.1", "n:head"): 1}
    d4 = topo.layout(p, 4)
    keys = {b["key"] for b in d4["boxes"]}
    assert "m:blocks.0.layer.1" in keys and "n:b0res" in keys   # shallower nodes stay individual
    assert [topo.box_count(p, d) for d in (1, 2, 3, 4)] == [2, 3, 5, 7]


def test_expand_one_module_and_auto_depth():
    p = topo.prepare(modular_graph())
    lay = topo.layout(p, 2, expand="blocks.1")
    keys = {b["key"] for b in lay["boxes"]}
    assert "m:blocks.0" in keys and "m:blocks.1" not in keys
    assert {"n:b1l0o0", "n:b1l1o2", "n:b1res"} <= keys
    # An expanded module too big for the budget opens one level at a time.
    lay = topo.layout(p, 1, expand="blocks", budget=5)
    assert {b["key"] for b in lay["boxes"]} == {"m:blocks.0.layer", "m:blocks.1.layer", "n:b0res", "n:b1res",
                                                "n:head"}
    assert topo.auto_depth([p], budget=100) is None        # everything fits: no collapsing
    assert topo.auto_depth([p], budget=5) == 3
    assert topo.auto_depth([p], budget=2) == 1
    assert topo.collapsed_modules(p, 2) == [("blocks.0", 7), ("blocks.1", 7)]


def test_unknown_module_path_is_inferred_from_neighbours():
    g = graph([node("a", ["in"], module="enc.attn"), node("t", ["a"], kind="layout", module=None, source_ops=[]),
               node("b", ["t"], module="enc.attn.proj")])
    p = topo.prepare(g)
    assert p.modules == ["enc.attn", "enc.attn", "enc.attn.proj"] and p.inferred == [False, True, False]
    lay = topo.layout(p, 2)
    assert lay["n_boxes"] == 1 and lay["boxes"][0]["count"] == 3   # the reorder does not split the box


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
    lx = {b["id"]: b for b in topo.layout(px)["boxes"]}
    assert lx["xd"]["fallback"] == 1 and lx["xd"]["fallback_reasons"] == ["D unsupported"]
    assert lx["xbc"]["fused"] == 1 and lx["xbc"]["source_ops"] == ["b", "c"] and lx["xa"]["fused"] == 0
    # Fusion groups from the report win over fused_from when given.
    px2 = topo.prepare(x, {"groups": [{"node": "xa", "pattern": "A+A → A", "absorbed": [{"id": "a"}, {"id": "a2"}]}]})
    lx2 = {b["id"]: b for b in topo.layout(px2)["boxes"]}
    assert lx2["xa"]["fused"] == 1 and lx2["xbc"]["fused"] == 0 and lx2["xa"]["fusion_pattern"] == "A+A → A"

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


def test_figure_encodings_are_valid_plotly_and_serialisable():
    import plotly.graph_objects as go
    src, x, y, rows = two_targets()
    aidx = topo.index_alignment(rows)
    px = topo.prepare(x)
    lay = topo.layout(px)
    gaps = {"xa": "no source op (test)"}
    fig = topo.figure(lay, gaps=gaps, selected=topo.nodes_for_source_ops(aidx, "x", ["b"]), title="x")
    go.Figure(fig.to_dict())                           # full plotly validation of the fast-built figure
    data = json.loads(fig.to_json())["data"]
    nnapi = next(t for t in data if t.get("name") == "nnapi")
    cpu = next(t for t in data if t.get("name") == "cpu")
    assert nnapi["marker"]["color"] == topo.BACKEND_COLORS["nnapi"]
    assert cpu["marker"]["line"]["color"] == [topo.FALLBACK_COLOR]       # the fallback node is outlined red
    sym = dict(zip([lay["boxes"][b]["id"] for b in nnapi["customdata"]], nnapi["marker"]["symbol"]))
    assert sym == {"xa": "circle", "xbc": "diamond"}
    hover = dict(zip([lay["boxes"][b]["id"] for b in nnapi["customdata"]], nnapi["hovertext"]))
    assert "absorbed source ops: b, c" in hover["xbc"] and "no counterpart" in hover["xa"]
    gap_trace = next(t for t in data if t.get("name", "").startswith("no counterpart"))
    sel_trace = next(t for t in data if t.get("name") == "selected source op")
    assert [lay["boxes"][b]["id"] for b in gap_trace["customdata"]] == ["xa"]
    assert [lay["boxes"][b]["id"] for b in sel_trace["customdata"]] == ["xbc"]
    assert nnapi["selectedpoints"] == [nnapi["customdata"].index(sel_trace["customdata"][0])]
    assert cpu["selectedpoints"] == []                 # everything else dimmed
    # Module boxes: squares, hover lists the backend mix.
    lay_m = topo.layout(topo.prepare(y), 1)
    fig_m = json.loads(topo.figure(lay_m).to_json())["data"]
    pts = next(t for t in fig_m if t.get("name") == "cpu")
    assert "square" in pts["marker"]["symbol"] and any("backends: cpu 4" in h for h in pts["hovertext"])


def test_alignment_rows_computed_when_report_has_none():
    src, x, y, rows = two_targets()
    report = {"capture": {"graph": src}, "targets": {"x": {"graph": x}, "y": {"graph": y}}}
    assert topo.alignment_rows(report) == rows
    assert topo.alignment_rows({**report, "alignment": {"source_ops": rows[:1]}}) == rows[:1]


def test_synthetic_large_report_collapses_within_budget():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from topology_bench import synthetic_report
    report = synthetic_report(3000)
    preps = [topo.prepare(t["graph"], t["fusions"]) for t in report["targets"].values()]
    assert min(len(p.ids) for p in preps) > 2000
    depth = topo.auto_depth(preps)
    assert depth is not None
    for p in preps:
        lay = topo.layout(p, depth)
        assert lay["n_boxes"] <= topo.DEFAULT_BUDGET
        for e in lay["edges"]:   # module-level graph of a chain of blocks stays a DAG
            assert lay["boxes"][e["source"]]["y"] < lay["boxes"][e["target"]]["y"]


# ------------------------------------------------------------------------------------------------------- page

def _charts(at):
    return at.get("plotly_chart")


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


@pytest.mark.parametrize("sample", SAMPLES)
def test_topology_page_renders_and_selects(sample):
    at = run_router(sample)
    assert at.title[0].value == "Topology"
    targets = at.multiselect(key="topo_targets").value
    assert len(targets) == 2
    assert len(_charts(at)) == 2
    assert any("graph evidence" in m.value for m in at.markdown)
    # Keyboard-free selection: a source op carried by both panes.
    ops = [o.split(" · ")[0] for o in at.selectbox(key="topo_source_op").options if o != "—"]  # labels → ids
    assert ops
    at.selectbox(key="topo_source_op").set_value(ops[len(ops) // 2]).run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert set(table["target"]) == set(targets)
    assert {"node", "op_type", "backend", "precision", "fused with", "status"} <= set(table.columns)
    assert set(table["status"]) <= {"present", "fused", "fallback", "absent"}
    pane_captions = [c.value for c in at.caption if " boxes (" in c.value]
    assert len(pane_captions) == 2
    present = table[table["status"] != "absent"]
    assert all(not c.endswith(" 0 selected") for c, t in zip(pane_captions, targets)
               if t in set(present["target"]))
    # Depth, expand and a third target.
    at.selectbox(key="topo_depth").set_value("1").run()
    assert not at.exception, at.exception
    expand = [o.rsplit(" (", 1)[0] for o in at.selectbox(key="topo_expand").options if o != "—"]
    if expand:
        at.selectbox(key="topo_expand").set_value(expand[0]).run()
        assert not at.exception, at.exception
        assert any(f"{expand[0]} expanded" in c.value for c in at.caption)
    at.selectbox(key="topo_depth").set_value("all").run()
    assert not at.exception, at.exception
    options = at.multiselect(key="topo_targets").options
    at.multiselect(key="topo_targets").set_value(options[:3]).run()
    assert not at.exception, at.exception
    assert len(_charts(at)) == 3
    at.button(key="topo_clear").click().run()
    assert not at.exception, at.exception
    assert not at.dataframe


def test_topology_page_selection_from_a_pane():
    """A click in a pane stores its nodes and source ops (what the plotly on_select callback does); the other
    panes then show the counterparts. Also: a compiler-inserted node explains it has no counterpart."""
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
    caps = [c.value for c in at.caption if " boxes (" in c.value]
    assert len(caps) == 2 and all("module depth" in c for c in caps)
    boxes = [int(c.split(" boxes")[0].split("→ ")[1]) for c in caps]
    assert max(boxes) <= topo.DEFAULT_BUDGET
    at.selectbox(key="topo_op_module").set_value("blocks.0.layer.0.attn").run()   # > 1000 ops: module first
    assert not at.exception, at.exception
    assert "matmul_16" in [o.split(" · ")[0] for o in at.selectbox(key="topo_source_op").options]
    at.selectbox(key="topo_source_op").set_value("matmul_16").run()
    assert not at.exception, at.exception
    assert set(at.dataframe[0].value["status"]) <= {"present", "fused", "fallback", "absent"}
