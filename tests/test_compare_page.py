"""The Compare page (pages/compare.py) and its views (xc_core/views/model_compare.py) on a real model diff: the
done-when pair of issue 56 (one inserted block, one swapped activation, one retrained layer) stored as two runs.
The views colour exactly the changed nodes of each side, list exactly those three changes, filter them; the page
says one line for an empty store, one run, a bad link, a run without a captured graph and two unrelated models."""
import copy
import os
from types import SimpleNamespace

import pytest
import torch
from streamlit.testing.v1 import AppTest

import model_pairs
from xc_core.views import graph_layout as layout, model_compare as mc, topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _store_run(folder, name: str, model, inputs) -> str:
    """The model analyzed for one fast target by the CLI, kept in the session's run store: its run key."""
    import json
    from xc_core.cli import main
    path = os.path.join(folder, f"{name}.pt2")
    torch.export.save(torch.export.export(model, inputs), path)
    out = os.path.join(folder, name)
    assert main(["analyze", path, "--targets", "ort-cpu", "--out", out, "--quiet"]) == 0
    with open(os.path.join(out, "report.json")) as f:
        return json.load(f)["run"]["key"]


@pytest.fixture(scope="module")
def pair_runs(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("compare-pair"))
    return {"base": _store_run(folder, "base", model_pairs.base_model(), model_pairs.example_inputs()),
            "head": _store_run(folder, "head", model_pairs.head_model(), model_pairs.example_inputs())}


@pytest.fixture(scope="module")
def pair(pair_runs):
    """The model diff of the pair and each side's module tree (as the page builds them)."""
    from xc_core.review.model_diff import model_diff_of_runs
    from xc_core.review.runs import from_store
    from xc_core.store import RunStore
    store = RunStore()
    base, head = from_store(pair_runs["base"], store), from_store(pair_runs["head"], store)
    trees = {side: topology.build_tree(layout.prepare(run.report["capture"]["graph"]))
             for side, run in ((mc.BASE, base), (mc.NEW, head))}
    return model_diff_of_runs(base, head), trees


def _classes_by_node(tree, v, status):
    boxes, clusters = mc.status_classes(tree, v, status)
    by_node = {v["boxes"][k]["id"]: cls for cls, ks in boxes.items() for k in ks if v["boxes"][k]["kind"] == "node"}
    by_group = {v["boxes"][k]["path"]: cls for cls, ks in boxes.items() for k in ks
                if v["boxes"][k]["kind"] == "group"}
    by_cluster = {v["clusters"][k]["path"]: cls for cls, ks in clusters.items() for k in ks}
    return by_node, by_group, by_cluster


def test_every_changed_node_and_only_those_is_coloured_on_each_side(pair):
    diff, trees = pair
    opened = {side: topology.view(tr, set(tr.size) - {""}) for side, tr in trees.items()}    # every group open
    node, group, cluster = _classes_by_node(trees[mc.NEW], opened[mc.NEW], diff["node_status"]["new"])
    assert node == {"conv2d_3": "mc-added", "relu_2": "mc-added", "conv2d_4": "mc-added", "add_1": "mc-added",
                    "hardswish": "mc-changed", "linear": "mc-changed"}
    assert not group
    # The inserted block's frame is green; the frames around a change of another kind are tinted.
    assert cluster["blocks.1"] == "mc-added" and cluster["blocks"] == cluster["head"] == mc.HOLDS_CLASS
    assert "blocks.0" not in cluster and "stem" not in cluster and "blocks.2" not in cluster
    node, _, cluster = _classes_by_node(trees[mc.BASE], opened[mc.BASE], diff["node_status"]["base"])
    assert node == {"relu_3": "mc-changed", "linear": "mc-changed"}            # nothing removed
    assert cluster == {"blocks": mc.HOLDS_CLASS, "blocks.2": mc.HOLDS_CLASS, "head": mc.HOLDS_CLASS}


def test_a_collapsed_group_says_what_it_hides(pair):
    diff, trees = pair
    tree = trees[mc.NEW]
    # blocks open, its children closed: the inserted block is one green box, blocks.3 (the swapped act) amber-ish
    v = topology.view(tree, {"blocks"})
    _, group, _ = _classes_by_node(tree, v, diff["node_status"]["new"])
    assert group["blocks.1"] == "mc-added" and group["blocks.3"] == mc.HOLDS_CLASS
    assert "blocks.0" not in group and "blocks.2" not in group and "stem" not in group
    v = topology.view(tree, set())
    _, group, _ = _classes_by_node(tree, v, diff["node_status"]["new"])
    assert group == {"blocks": mc.HOLDS_CLASS, "head": mc.HOLDS_CLASS}


def test_marks_reach_the_svg_and_counterparts_pair_the_boxes(pair):
    diff, trees = pair
    views = {side: topology.view(tr, set(tr.size) - {""}) for side, tr in trees.items()}
    v, tree = views[mc.NEW], trees[mc.NEW]
    boxes, clusters = mc.status_classes(tree, v, diff["node_status"]["new"])
    svg = mc.mark_clusters(topology.mark(topology.render_svg(v), boxes), clusters)
    assert svg.count('class="node mc-added"') == 4 and svg.count('class="node mc-changed"') == 2
    assert svg.count('class="cluster mc-added"') == 1
    # Boxes pair through node_map: hardswish with the base's relu_3; the inserted block's boxes with nothing.
    cp = mc.counterpart_boxes(v, tree.prep, views[mc.BASE], trees[mc.BASE].prep, mc.pairs(diff, mc.NEW))
    box_id = {b["id"]: f"b{k}" for k, b in enumerate(v["boxes"]) if b["kind"] == "node"}
    base_id = {f"b{k}": b["id"] for k, b in enumerate(views[mc.BASE]["boxes"]) if b["kind"] == "node"}
    assert base_id[cp[box_id["hardswish"]]] == "relu_3" and base_id[cp[box_id["conv2d_5"]]] == "conv2d_3"
    assert not any(box_id[n] in cp for n in ("conv2d_3", "relu_2", "conv2d_4", "add_1"))
    assert mc.counterpart_nodes(diff, mc.BASE, ["relu_3", "linear"]) == ["hardswish", "linear"]
    assert mc.counterpart_nodes(diff, mc.NEW, ["relu_2"]) == []           # added: no counterpart


def test_group_paths_cross_through_renumbering(pair):
    diff, _ = pair
    assert mc.counterpart_path(diff, "blocks.3.act", mc.NEW) == "blocks.2.act"
    assert mc.counterpart_path(diff, "blocks.2", mc.NEW) == "blocks.1"
    assert mc.counterpart_path(diff, "blocks.1", mc.BASE) == "blocks.2"
    assert mc.counterpart_path(diff, "blocks.1", mc.NEW) is None          # the inserted block: none on the base
    assert mc.counterpart_path(diff, "head.fc", mc.NEW) == "head.fc"


def test_the_change_list_is_exactly_the_three_changes_and_filters(pair):
    diff, _ = pair
    rows = mc.change_rows(diff)
    assert [(r["kind"], r["module_path"], r["op"], r["base_op"]) for r in rows] == [
        ("added", "blocks.1", "block of 4 ops", "—"),
        ("replaced", "blocks.3.act", "hardswish", "relu"),
        ("weights", "head.fc", "linear", "—")]
    assert rows[0]["new_nodes"] == ["conv2d_3", "relu_2", "conv2d_4", "add_1"] and rows[0]["base_nodes"] == []
    assert rows[1]["detail"] == "relu → hardswish" and rows[1]["base_nodes"] == ["relu_3"]
    assert rows[2]["detail"] == "head.fc.weight (5×8): rel L2 0.1"
    assert "conv2d×2" in rows[0]["detail"]
    assert mc.counts_line(diff) == "1 block added (4 ops) · 1 op replaced · weights changed on 1 op · 18 ops matched"
    assert "blocks.1 → blocks.2 (renumbered" in mc.renames_caption(diff)

    assert [r["kind"] for r in mc.filter_rows(rows, {"replaced", "weights"})] == ["replaced", "weights"]
    assert [r["module_path"] for r in mc.filter_rows(rows, None, "blocks.1")] == ["blocks.1"]
    assert [r["module_path"] for r in mc.filter_rows(rows, None, "head")] == ["head.fc"]
    assert mc.filter_rows(rows, None, "block") == []                      # a module, not a prefix of a name
    assert [r["op"] for r in mc.filter_rows(rows, None, None, "HARDSWISH")] == ["hardswish"]
    assert mc.filter_rows(rows, {"removed"}) == []
    assert set(mc.top_modules(diff)) == {"blocks.1", "blocks.3", "head"}


def test_tolerance_and_fields_change_what_is_coloured(pair_runs):
    from xc_core.review.model_diff import ModelDiffOptions, model_diff_of_runs
    from xc_core.review.runs import from_store
    from xc_core.store import RunStore
    store = RunStore()
    base, head = from_store(pair_runs["base"], store), from_store(pair_runs["head"], store)
    loose = model_diff_of_runs(base, head, ModelDiffOptions(weight_rtol=0.2))
    assert [r["kind"] for r in mc.change_rows(loose)] == ["added", "replaced"]
    assert "linear" not in loose["node_status"]["new"]
    weights_only = model_diff_of_runs(base, head, ModelDiffOptions(fields=("weights",)))
    assert [r["kind"] for r in mc.change_rows(weights_only)] == ["weights"]
    assert weights_only["node_status"]["new"] == {"linear": "changed"}
    neither = model_diff_of_runs(base, head, ModelDiffOptions(fields=("attributes", "shapes")))
    assert mc.change_rows(neither) == []
    assert mc.counts_line(neither) == "No change in the model's attributes, shapes (18 ops matched)."


# ------------------------------------------------------------------------------------------------ the page

def _page(monkeypatch=None, store=None, **params) -> AppTest:
    """The page alone, as the router runs it (pages/_ui.guard_page), on the session's store or another one."""
    if store is not None:
        from pages import _ui
        monkeypatch.setattr(_ui, "_service", lambda: SimpleNamespace(store=store))
    at = AppTest.from_file(os.path.join(ROOT, "pages", "compare.py"), default_timeout=300)
    at.session_state["_xc_routed"] = True
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, at.exception
    return at


def test_an_empty_store_and_a_single_run_are_one_line_each(tmp_path, monkeypatch, pair_runs):
    from xc_core.store import RunStore
    empty = RunStore(str(tmp_path / "empty"))
    at = _page(monkeypatch, empty)
    assert [i.value for i in at.info][0].startswith("No runs yet") and not at.dataframe
    one = RunStore(str(tmp_path / "one"))
    report = RunStore().get(pair_runs["base"])
    one.put(pair_runs["base"], report, None, origin="imported")
    at = _page(monkeypatch, one)
    assert any("Compare needs two runs" in i.value for i in at.info) and not at.dataframe


def test_a_link_opens_the_pair_with_its_three_changes(pair_runs):
    at = _page(base=pair_runs["base"][:12], head=pair_runs["head"][:12])
    assert at.session_state["cmp_base"] == pair_runs["base"] and at.session_state["cmp_head"] == pair_runs["head"]
    assert any(m.value.replace("\\", "") == "**1 block added (4 ops) · 1 op replaced · weights changed on 1 op · "
               "18 ops matched**" for m in at.markdown)       # plain() escapes the parentheses
    table = at.dataframe[0].value
    assert list(table["kind"]) == ["added", "replaced", "weights"]
    assert list(table["module path"]) == ["blocks.1", "blocks.3.act", "head.fc"]
    # Filtering by kind keeps the rows of that kind.
    at.multiselect(key="cmp_kinds").set_value(["replaced"]).run()
    assert not at.exception and list(at.dataframe[0].value["op"]) == ["hardswish"]
    # A looser weight tolerance: the retrained layer is no longer a change.
    at.multiselect(key="cmp_kinds").set_value(["added", "replaced"]).run()
    at.number_input(key="cmp_weight_rtol").set_value(0.5).run()
    assert not at.exception and list(at.dataframe[0].value["kind"]) == ["added", "replaced"]


def test_bad_states_are_one_error_line(pair_runs, monkeypatch, tmp_path):
    at = _page(base="0123456789ab", head=pair_runs["head"][:12])
    assert any("no such run in the store" in e.value for e in at.error)
    # A run whose report has no captured graph (an old or a hand-made report.json).
    from xc_core.store import RunStore
    store = RunStore(str(tmp_path / "graphless"))
    report = RunStore().get(pair_runs["base"])
    store.put(pair_runs["head"], RunStore().get(pair_runs["head"]), None, origin="imported")
    hollow = copy.deepcopy(report)
    hollow["capture"]["graph"]["nodes"] = []
    store.put(pair_runs["base"], hollow, None, origin="imported")
    at = _page(monkeypatch, store, base=pair_runs["base"][:12], head=pair_runs["head"][:12])
    assert len(at.error) == 1 and "has no captured graph" in at.error[0].value and not at.dataframe


@pytest.mark.slow
def test_two_unrelated_models_are_one_line_and_nothing_else(tmp_path):
    mlp = _store_run(str(tmp_path), "mlp", model_pairs.mlp_model(), model_pairs.mlp_inputs())
    conv = _store_run(str(tmp_path), "convnet", model_pairs.convnet_model(), model_pairs.convnet_inputs())
    at = _page(base=mlp[:12], head=conv[:12])
    assert len(at.warning) == 1 and "nothing in common" in at.warning[0].value
    assert not at.dataframe and not at.error


def test_an_onnx_run_against_a_pytorch_run_draws_the_graph_the_diff_read(tmp_path, pair_runs):
    # The PyTorch side is diffed through its ONNX export: its pane draws that export (ONNX ops), so the colours land
    # on the diff's own nodes — not on the aten graph, whose node ids the diff never saw.
    import json
    from xc_core.cli import main
    path = str(tmp_path / "head.onnx")
    torch.onnx.export(model_pairs.head_model(), model_pairs.example_inputs(), path, dynamo=True, verbose=False)
    assert main(["analyze", path, "--targets", "ort-cpu", "--out", str(tmp_path / "onnx"), "--quiet"]) == 0
    with open(tmp_path / "onnx" / "report.json") as f:
        onnx_key = json.load(f)["run"]["key"]
    at = _page(base=pair_runs["base"][:12], head=onnx_key[:12])
    assert list(at.dataframe[0].value["kind"]) == ["added", "replaced", "weights"]
    drawn = at.session_state["_cmp_drawings"]
    base_ops = {b["op_type"] for b in drawn[mc.BASE]["boxes"] if b["kind"] == "node"}
    assert "Conv" in base_ops and "conv2d" not in base_ops
    assert any("ONNX export" in c.value for c in at.caption)
