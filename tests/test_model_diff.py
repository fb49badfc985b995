"""The model diff engine (xc_core/review/model_diff.py): two model sides → what changed in the model itself."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch import nn

import model_pairs
from xc_core.analysis.model_weights import records_from_program
from xc_core.errors import XcInputError
from xc_core.readers.exported_program import exported_program_graph
from xc_core.report.types import NodeRecord, WeightRecord
from xc_core.review.model_diff import ModelDiffOptions, _opcodes, diff_models
from xc_core.review.model_sides import ModelSide, side_from_report

NO_CHANGES = {"added": 0, "removed": 0, "replaced": 0, "attributes": 0, "shapes": 0, "dtypes": 0, "weights": 0,
              "renamed_modules": 0}


def captured(model, inputs, dynamic_shapes=None):
    """The captured graph's node dicts and weight record dicts, as capture writes them into a report."""
    ep = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
    graph = exported_program_graph(ep, "captured", arguments=True)
    return ep, [n.to_dict() for n in graph.nodes], records_from_program(ep, graph)


def side(model, inputs, label, values=True, dynamic_shapes=None, flat=False) -> ModelSide:
    ep, nodes, weights = captured(model, inputs, dynamic_shapes)
    if flat:        # a graph without module paths (an ONNX file from an exporter that writes no metadata)
        nodes = [{**n, "module_path": None} for n in nodes]
        weights = [{**w, "module_path": None} for w in weights]
    state = {**ep.state_dict, **ep.constants}
    read = (lambda names: {n: state[n].detach().numpy() for n in names if n in state}) if values else None
    return ModelSide(label, "aten", "captured graph", [NodeRecord.from_dict(n) for n in nodes],
                     [WeightRecord.from_dict(w) for w in weights], read)


def pair_sides(**kw):
    inputs = model_pairs.example_inputs()
    return (side(model_pairs.base_model(), inputs, "base", **kw), side(model_pairs.head_model(), inputs, "head", **kw))


def kinds(diff) -> list[tuple]:
    return [(c["kind"], c["module_path"], c["op_type"]) for c in diff["changes"]]


def test_done_when_pair_gives_exactly_the_three_changes():
    base, head = pair_sides()
    d = diff_models(base, head)
    assert d["comparable"] and d["line"] is None
    assert d["summary"] == {**NO_CHANGES, "added": 4, "replaced": 1, "weights": 1}
    assert d["blocks"] == [{"kind": "added", "module_path": "blocks.1", "ops": 4,
                            "op_types": {"conv2d": 2, "relu": 1, "add": 1}}]
    assert kinds(d) == [("added", "blocks.1.conv1", "conv2d"), ("added", "blocks.1.act", "relu"),
                        ("added", "blocks.1.conv2", "conv2d"), ("added", "blocks.1", "add"),
                        ("replaced", "blocks.3.act", "hardswish"), ("weights", "head.fc", "linear")]
    assert all(c["block"] == "blocks.1" for c in d["changes"][:4])
    replaced = d["changes"][4]
    assert replaced["base_op"] == "relu" and replaced["block"] is None
    assert replaced["text"] == "replaced: relu → hardswish at blocks.3.act"
    [tensor] = d["changes"][5]["detail"]["tensors"]
    assert tensor["name"] == tensor["base_name"] == "head.fc.weight"
    assert tensor["rel_l2_bound"] == "exact" and tensor["rel_l2"] == pytest.approx(0.1, rel=1e-6)
    assert tensor["base_sha256"] != tensor["new_sha256"] and tensor["shape"] == [5, 8] and tensor["numel"] == 40
    assert d["renamed_modules"] == [{"base": "blocks.1", "new": "blocks.2", "why": "renumbered"},
                                    {"base": "blocks.2", "new": "blocks.3", "why": "renumbered"}]
    assert d["by_module"] == [
        {"module_path": "blocks.1", "added": 4, "removed": 0, "replaced": 0, "changed": 0},
        {"module_path": "blocks.3", "added": 0, "removed": 0, "replaced": 1, "changed": 0},
        {"module_path": "head", "added": 0, "removed": 0, "replaced": 0, "changed": 1}]
    # every node is accounted for: matched, or added / removed
    assert d["matched"] == len(base.nodes) == len(head.nodes) - 4 and len(d["node_map"]) == d["matched"]
    new_ids = {c["new_node"]: c["kind"] for c in d["changes"]}
    assert d["node_status"]["new"] == {i: {"weights": "changed"}.get(k, k) for i, k in new_ids.items()}
    assert set(d["node_status"]["base"].values()) == {"replaced", "changed"}
    assert d["notes"] == [] and d["evidence"] == "measured"
    assert d["base"] == {"label": "base", "family": "aten", "graph": "captured graph", "nodes": len(base.nodes),
                         "weights": len(base.weights), "values": True}
    assert json.loads(json.dumps(d)) == d


def test_done_when_pair_from_reports_without_files_bounds_the_weight_change():
    """Through side_from_report on report dicts alone (no model files): the change is the norms' lower bound."""
    inputs = model_pairs.example_inputs()
    sides = []
    for model, name in ((model_pairs.base_model(), "net.pt2"), (model_pairs.head_model(), "net.pt2")):
        _, nodes, weights = captured(model, inputs)
        report = {"source": {"name": name, "kind": "exported-program"},
                  "capture": {"graph": {"nodes": nodes}, "weights": weights}}
        sides.append(side_from_report(report))
    d = diff_models(*sides)
    assert d["summary"] == {**NO_CHANGES, "added": 4, "replaced": 1, "weights": 1}
    [tensor] = d["changes"][-1]["detail"]["tensors"]
    assert tensor["rel_l2_bound"] == "lower" and tensor["rel_l2"] == pytest.approx(0.1, rel=1e-6)
    assert "at least 0.1" in d["changes"][-1]["text"]
    assert d["base"]["values"] is False and d["notes"]      # says why the change is only bounded


def test_flat_graph_without_module_paths_still_finds_the_three_changes():
    base, head = pair_sides(flat=True)
    d = diff_models(base, head)
    assert d["summary"] == {**NO_CHANGES, "added": 4, "replaced": 1, "weights": 1}
    assert [c["op_type"] for c in d["changes"] if c["kind"] == "added"] == ["conv2d", "relu", "conv2d", "add"]
    assert d["blocks"] == [] and d["renamed_modules"] == []


def test_renamed_container_is_a_rename_only():
    inputs = model_pairs.example_inputs()
    d = diff_models(side(model_pairs.base_model(), inputs, "base"), side(model_pairs.renamed_model(), inputs, "ren"))
    assert d["summary"] == {**NO_CHANGES, "renamed_modules": 1}
    assert d["renamed_modules"] == [{"base": "blocks", "new": "layers", "why": "renamed"}]
    assert d["changes"] == [] and d["blocks"] == []


def test_identical_models_have_no_change():
    inputs = model_pairs.example_inputs()
    base = side(model_pairs.base_model(), inputs, "a")
    d = diff_models(base, side(model_pairs.base_model(), inputs, "b"))
    assert d["summary"] == NO_CHANGES and d["changes"] == [] and d["by_module"] == []
    assert d["node_status"] == {"base": {}, "new": {}}
    assert d["node_map"] == {n.id: n.id for n in base.nodes}


def test_fields_and_weight_tolerance_hide_the_weight_change():
    base, head = pair_sides()
    no_weights = diff_models(base, head, ModelDiffOptions(fields=("ops", "attributes", "shapes", "dtypes")))
    assert no_weights["summary"] == {**NO_CHANGES, "added": 4, "replaced": 1}
    assert no_weights["options"]["fields"] == ["ops", "attributes", "shapes", "dtypes"]
    tolerant = diff_models(base, head, ModelDiffOptions(weight_rtol=0.2))
    assert tolerant["summary"] == {**NO_CHANGES, "added": 4, "replaced": 1}
    assert not any(v == "changed" for v in tolerant["node_status"]["new"].values())
    strict = diff_models(base, head, ModelDiffOptions(weight_rtol=0.05))
    assert strict["summary"]["weights"] == 1
    ops_only = diff_models(base, head, ModelDiffOptions(fields=("weights",)))
    assert ops_only["summary"] == {**NO_CHANGES, "weights": 1} and ops_only["blocks"] == []


def test_a_lower_bound_within_the_tolerance_still_shows():
    """Without values, a norm that moved by 10% says the weight moved by at least 10%, not at most: not hidden."""
    base, head = pair_sides(values=False)
    d = diff_models(base, head, ModelDiffOptions(weight_rtol=0.2))
    [tensor] = d["changes"][-1]["detail"]["tensors"]
    assert tensor["rel_l2_bound"] == "lower"


def test_stride_change_is_an_attribute_and_one_shape_change():
    inputs = model_pairs.example_inputs()
    strided = model_pairs.base_model()
    strided.stem[0].stride = (2, 2)
    d = diff_models(side(model_pairs.base_model(), inputs, "base"), side(strided, inputs, "strided"))
    assert d["summary"] == {**NO_CHANGES, "attributes": 1, "shapes": 1}
    attributes, shapes = d["changes"]
    assert (attributes["module_path"], attributes["op_type"]) == ("stem.0", "conv2d")
    assert attributes["detail"] == {"stride": [[1, 1], [2, 2]]}
    assert shapes["detail"] == {"output 0": [[1, 8, 8, 8], [1, 8, 4, 4]]}      # reported where it starts
    assert attributes["text"] == "attributes of conv2d at stem.0: stride [1, 1] → [2, 2]"


class Leaky(nn.Module):
    def __init__(self, slope: float, dtype=torch.float32):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.LeakyReLU(slope)
        self.dtype = dtype

    def forward(self, x):
        return self.act(self.fc(x)).to(self.dtype)


def leaky(slope: float, dtype=torch.float32) -> Leaky:
    torch.manual_seed(0)
    return Leaky(slope, dtype).eval()


def test_attribute_tolerance():
    inputs = (torch.randn(2, 4),)
    base, new = side(leaky(0.2), inputs, "a"), side(leaky(0.202), inputs, "b")
    d = diff_models(base, new)
    assert d["summary"] == {**NO_CHANGES, "attributes": 1}
    assert d["changes"][0]["detail"] == {"negative_slope": [0.2, 0.202]}
    assert diff_models(base, new, ModelDiffOptions(attribute_rtol=0.05))["summary"] == NO_CHANGES


def test_dtype_change():
    inputs = (torch.randn(2, 4),)
    d = diff_models(side(leaky(0.01), inputs, "a"), side(leaky(0.01, torch.float64), inputs, "b"))
    assert d["summary"] == {**NO_CHANGES, "attributes": 1, "dtypes": 1}
    dtypes = next(c for c in d["changes"] if c["kind"] == "dtypes")
    assert dtypes["detail"] == {"output 0": ["float32", "float64"]}


def test_unread_buffer_change_is_a_weights_change_of_its_module():
    """num_batches_tracked is read by no node: matched by name, its change reported on its module."""
    inputs = model_pairs.example_inputs()
    counted = model_pairs.base_model()
    counted.stem[1].num_batches_tracked.fill_(7)
    d = diff_models(side(model_pairs.base_model(), inputs, "a"), side(counted, inputs, "b"))
    assert d["summary"] == {**NO_CHANGES, "weights": 1}
    [change] = d["changes"]
    assert (change["module_path"], change["op_type"], change["new_node"]) == ("stem.1", "", None)
    assert change["detail"]["tensors"][0]["name"] == "stem.1.num_batches_tracked"


def test_unrelated_models_are_one_line():
    mlp = side(model_pairs.mlp_model(), model_pairs.mlp_inputs(), "mlp.pt2")
    conv = side(model_pairs.convnet_model(), model_pairs.convnet_inputs(), "convnet.pt2")
    d = diff_models(mlp, conv)
    assert d["comparable"] is False
    assert d["line"] == (f"mlp.pt2 ({len(mlp.nodes)} nodes) and convnet.pt2 ({len(conv.nodes)} nodes) have nothing "
                         f"in common beyond 1 op (linear)")
    assert d["changes"] == [] and d["blocks"] == [] and d["summary"] == NO_CHANGES


def test_families_that_do_not_line_up():
    base, head = pair_sides()
    d = diff_models(base, dataclasses.replace(head, family="onnx"))
    assert d["comparable"] is False and "their ops do not line up" in d["line"]


class ThreeHeads(nn.Module):
    def __init__(self, second=torch.tanh):
        super().__init__()
        self.trunk = nn.Linear(6, 6)
        self.second = second

    def forward(self, x):
        h = self.trunk(x)
        return torch.relu(h), self.second(h), h.sum(-1)


def test_three_outputs_and_a_dynamic_batch():
    torch.manual_seed(0)
    base_model = ThreeHeads().eval()
    new_model = ThreeHeads(torch.sigmoid).eval()
    new_model.load_state_dict(base_model.state_dict())
    inputs = (torch.randn(3, 6),)
    dynamic = {"x": {0: torch.export.Dim("batch")}}
    d = diff_models(side(base_model, inputs, "a", dynamic_shapes=dynamic),
                    side(new_model, inputs, "b", dynamic_shapes=dynamic))
    assert d["summary"] == {**NO_CHANGES, "replaced": 1}
    assert (d["changes"][0]["base_op"], d["changes"][0]["op_type"]) == ("tanh", "sigmoid")
    assert json.loads(json.dumps(d)) == d


def test_by_module_splits_a_dominant_module():
    """Most changes under `blocks`: the summary names blocks.1 and blocks.3, not `blocks`."""
    base, head = pair_sides()
    rows = diff_models(base, head)["by_module"]
    assert [r["module_path"] for r in rows] == ["blocks.1", "blocks.3", "head"]


def test_bad_options_are_one_line():
    with pytest.raises(XcInputError, match="unknown.*accepted: ops, attributes"):
        ModelDiffOptions(fields=("ops", "colour"))
    with pytest.raises(XcInputError, match="weight_rtol.*accepted: a number >= 0"):
        ModelDiffOptions(weight_rtol=-1)


@pytest.mark.parametrize("inserts", [[0], [1500], [2999], list(range(7, 3000, 40)), list(range(5, 20000, 150))])
def test_long_repeated_sequences_align_exactly(inserts):
    """The aligner's long-sequence paths (exact for few edits; windows for many): inserted tokens in long runs of a
    repeated unit — where a shifted copy of the unit looks as good as the right one — are exactly those inserts."""
    a = ["conv", "relu", "add", "conv", "relu", "conv", "add"] * (3000 // 7 if max(inserts) < 3000 else 20000 // 7)
    b = list(a)
    for at in reversed(inserts):
        b.insert(at, "gelu")
    ops = _opcodes(a, b)
    i = j = 0
    for tag, i1, i2, j1, j2 in ops:        # contiguous cover of both sides, equal ranges really equal
        assert (i1, j1) == (i, j)
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    assert sum(j2 - j1 for tag, i1, i2, j1, j2 in ops if tag != "equal") == len(inserts)
    assert all(tag in ("equal", "insert") for tag, *_ in ops)


def test_block_moved_to_another_parent_is_a_rename():
    """blocks.2 taken out of the Sequential and run after it as `extra`: same ops, same weights — moved, not
    removed and added."""
    base = model_pairs.base_model()

    class Moved(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.blocks, self.extra, self.head = base.stem, base.blocks[:2], base.blocks[2], base.head

        def forward(self, x):
            return self.head(self.extra(self.blocks(self.stem(x))))

    inputs = model_pairs.example_inputs()
    d = diff_models(side(model_pairs.base_model(), inputs, "a"), side(Moved().eval(), inputs, "b"))
    assert d["summary"] == {**NO_CHANGES, "renamed_modules": 1}
    assert d["renamed_modules"] == [{"base": "blocks.2", "new": "extra", "why": "renamed"}]


def _report(model, inputs, kind="exported-program") -> dict:
    _, nodes, weights = captured(model, inputs)
    return {"source": {"name": "net.pt2", "kind": kind}, "capture": {"graph": {"nodes": nodes}, "weights": weights}}


def test_model_diff_of_runs():
    from xc_core.review.model_diff import model_diff_of_runs
    from xc_core.review.runs import Run
    inputs = model_pairs.example_inputs()
    base = Run(_report(model_pairs.base_model(), inputs), label="base run")
    new = Run(_report(model_pairs.head_model(), inputs), label="new run")
    d = model_diff_of_runs(base, new, ModelDiffOptions(fields=("ops",)))
    assert d["summary"] == {**NO_CHANGES, "added": 4, "replaced": 1}
    assert (d["base"]["label"], d["new"]["label"]) == ("base run", "new run")
    refused = model_diff_of_runs(base, Run({"source": {"name": "m.mlpackage", "kind": "coreml"}}, label="core ml"))
    assert refused["comparable"] is False and refused["changes"] == [] and "coreml" in refused["line"]
    assert refused["new"]["label"] == "core ml"


def test_unread_weight_renamed_with_the_same_content_is_no_change():
    inputs = model_pairs.example_inputs()
    base = side(model_pairs.base_model(), inputs, "a")
    new = side(model_pairs.base_model(), inputs, "b")
    new.weights = [dataclasses.replace(w, name="stem.1.batches_seen") if w.name.endswith("num_batches_tracked")
                   else w for w in new.weights]
    assert diff_models(base, new)["summary"] == NO_CHANGES


def test_module_trees_of_another_shape_still_match_their_ops():
    # The same model, its module paths nested one level deeper on one side and half of them flattened away (an
    # exporter that splits scopes differently): the trees disagree, the ops must not — no op added or removed.
    inputs = model_pairs.example_inputs()
    base = side(model_pairs.base_model(), inputs, "base")
    nested = dataclasses.replace(base, label="nested", nodes=[
        dataclasses.replace(n, module_path=(f"wrap.{n.module_path}" if n.module_path and i % 2 else None))
        for i, n in enumerate(base.nodes)])
    d = diff_models(base, nested)
    assert d["comparable"] and d["blocks"] == []
    assert not [c for c in d["changes"] if c["kind"] in ("added", "removed", "replaced")], kinds(d)
    assert d["matched"] == len(base.nodes)
