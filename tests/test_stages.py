"""Stages: each target's steps on the six canonical stages, with op counts checked against the toolchains
themselves (ORT's dumped model per level, OpenVINO's model as read / after its common transformations / its
runtime model, coremltools' pipeline cut after a pass); step graphs stored once beside the report; the first
stage at which targets diverge per source op; the layout audit."""
import gzip
import json
import os

import pytest

from xc_core.analysis.stage_trace import read_stage_graphs
from xc_core.lowering import FUSION, GRAPH_OPT, IMPORT, KERNEL, STAGES

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _steps(report, tid):
    return report["targets"][tid]["stages"]["steps"]


def _onnx_path(out):
    return os.path.join(out, "artifacts", "capture", "model.onnx")


@pytest.mark.slow
def test_every_target_records_the_six_stages_in_order(sample_report):
    report, _ = sample_report("vision-mini")
    for tid, t in report["targets"].items():
        assert t["status"] == "ok", (tid, t["error"])
        stages = [s["stage"] for s in _steps(report, tid)]
        assert set(stages) <= set(STAGES)
        assert stages[0] == IMPORT, tid
        assert stages[-2:] == ["backend-selection", "fallback-insertion"], tid
        assert all(s["op_count"] is not None for s in _steps(report, tid)), tid


@pytest.mark.slow
def test_ort_op_counts_per_level_are_ort_s_own(sample_report, tmp_path):
    """Each ORT level's op count is the node count of the model ORT itself writes at that level (its layout
    reorders and constants aside), and the configured level's is the compiled graph's."""
    import onnx
    import onnxruntime as ort
    from xc_core.targets.onnx_regions import LAYOUT_OPS
    report, out = sample_report("vision-mini")
    steps = {s["name"]: s for s in _steps(report, "ort-cpu")}
    assert [s["stage"] for s in _steps(report, "ort-cpu")][:4] == [IMPORT, GRAPH_OPT, FUSION, KERNEL]
    counts = {}
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_LAYOUT", "ORT_ENABLE_ALL"):
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        so.optimized_model_filepath = str(tmp_path / f"{level}.onnx")
        ort.InferenceSession(_onnx_path(out), so, providers=["CPUExecutionProvider"])
        nodes = onnx.load(so.optimized_model_filepath).graph.node
        counts[level] = sum((n.op_type, n.domain) not in LAYOUT_OPS and n.op_type != "Constant" for n in nodes)
        reorders = sum((n.op_type, n.domain) in LAYOUT_OPS for n in nodes)
        if level in steps:
            assert steps[level]["op_count"] == counts[level], level
            assert steps[level]["counts"]["reorders"] == reorders, level
    assert _steps(report, "ort-cpu")[0]["op_count"] == counts["ORT_DISABLE_ALL"]
    assert counts["ORT_ENABLE_BASIC"] < counts["ORT_DISABLE_ALL"]          # Conv+BN folded at level 1
    assert counts["ORT_ENABLE_EXTENDED"] < counts["ORT_ENABLE_BASIC"]      # Conv+activation fused at level 2
    assert report["targets"]["ort-cpu"]["op_count_after"] == counts["ORT_ENABLE_ALL"]


@pytest.mark.slow
def test_ort_levels_above_the_node_limit_are_left_out_and_the_stages_say_how_to_see_them(tmp_path):
    """Above --max-level-graph-nodes the ORT targets build no session per level: the steps keep the model ORT
    loads and its final graph, and the final step's note names the flag that brings the levels back."""
    from xc_core.api import analyze
    from xc_core.limits import Limits
    report = analyze("sample:vision-mini", ["ort-cpu"], limits=Limits(max_level_graph_nodes=1), isolate=False)
    steps = _steps(report, "ort-cpu")
    assert report["targets"]["ort-cpu"]["status"] == "ok"
    assert [s["name"] for s in steps][:2] == ["the ONNX model ORT loads", "ORT_ENABLE_ALL"]
    note = steps[1]["note"]
    assert "--max-level-graph-nodes" in note and "ORT_ENABLE_BASIC" in note and "left out" in note
    full = analyze("sample:vision-mini", ["ort-cpu"], limits=Limits(max_level_graph_nodes=10**6), isolate=False)
    assert "ORT_ENABLE_BASIC" in [s["name"] for s in _steps(full, "ort-cpu")]


@pytest.mark.slow
def test_openvino_op_counts_per_step_are_openvino_s_own(sample_report):
    import openvino as ov
    from openvino._offline_transformations import apply_moc_transformations
    report, out = sample_report("vision-mini")
    steps = _steps(report, "openvino-cpu")
    assert [s["stage"] for s in steps][:4] == [IMPORT, GRAPH_OPT, FUSION, KERNEL]
    bookkeeping = {"Parameter", "Result", "Constant"}
    core = ov.Core()
    model = core.read_model(_onnx_path(out))
    assert steps[0]["op_count"] == sum(op.get_type_name() not in bookkeeping for op in model.get_ordered_ops())
    moc = model.clone()
    apply_moc_transformations(moc, cf=True)
    assert steps[1]["op_count"] == sum(op.get_type_name() not in bookkeeping for op in moc.get_ordered_ops())
    assert steps[1]["op_count"] < steps[0]["op_count"]
    precision = report["targets"]["openvino-cpu"]["info"].get("inference_precision_requested")
    config = {"INFERENCE_PRECISION_HINT": precision} if precision else {}
    runtime = core.compile_model(model, "CPU", config).get_runtime_model()
    kind = {}
    for op in runtime.get_ordered_ops():     # topological: a layer fed only by constants computes a constant
        layer = op.get_rt_info()["layerType"].astype(str)
        fed = [kind[i.get_source_output().get_node().get_friendly_name()] for i in op.inputs()]
        kind[op.get_friendly_name()] = ("const" if layer in ("Const", "Constant") or (fed and set(fed) == {"const"})
                                        else layer)
    layers = list(kind.values())
    assert steps[2]["op_count"] == sum(t not in ("Input", "Output", "Reorder", "Convert", "const") for t in layers)
    assert steps[3]["counts"]["reorders"] == layers.count("Reorder")


@pytest.mark.slow
def test_coreml_pass_walk_matches_coremltools_cut_after_the_same_pass(sample_report):
    """The per-pass walk replays ct.convert's default pipeline: the count after its fusion step is what
    ct.convert gives with the pipeline cut after that pass, and the walk ends where ct.convert ends."""
    import coremltools as ct
    import torch
    from xc_core.sources.samples import SAMPLES
    report, _ = sample_report("vision-mini")
    steps = _steps(report, "coreml-ane")
    fusion = [s for s in steps if s["stage"] == FUSION and "pass_index" in s["counts"]]
    assert fusion and fusion[0]["name"] == "common::fuse_conv_batchnorm"
    sample = SAMPLES["vision-mini"]
    ep = torch.export.export(sample.model(), tuple(torch.zeros(s.shape) for s in sample.inputs))
    ep = ep.run_decompositions({})
    kwargs = {"convert_to": "milinternal", "compute_precision": ct.precision.FLOAT16,
              "minimum_deployment_target": ct.target.iOS18}

    def compute_ops(pipeline):
        prog = ct.convert(ep, pass_pipeline=pipeline, **kwargs)
        return sum(op.op_type not in ("const", "cast") for op in prog.functions["main"].operations)

    assert steps[0]["op_count"] == compute_ops(ct.PassPipeline.EMPTY)
    passes = ct.PassPipeline.DEFAULT.passes
    cut = ct.PassPipeline(passes[:fusion[0]["counts"]["pass_index"] + 1])
    assert fusion[0]["op_count"] == compute_ops(cut)
    walked = [s for s in steps if "pass_index" in s["counts"]]
    assert walked[-1]["op_count"] == compute_ops(ct.PassPipeline.DEFAULT)
    assert walked[-1]["op_count"] == report["targets"]["coreml-ane"]["op_count_after"]


@pytest.mark.slow
def test_inductor_steps_are_its_pre_and_post_grad_graphs(sample_report):
    report, _ = sample_report("vision-mini")
    steps = _steps(report, "inductor-cpu")
    assert steps[0]["op_count"] == report["capture"]["op_count_before"]      # pre-grad: the ExportedProgram's ops
    assert steps[1]["stage"] == GRAPH_OPT and steps[1]["op_count"] > steps[0]["op_count"]  # decomposed
    assert steps[2]["graph"] == "final"


@pytest.mark.slow
def test_step_graphs_are_stored_once_beside_the_report(sample_report):
    report, out = sample_report("vision-mini")
    assert report["stage_graphs"]["file"] == "stages.json.gz"
    graphs = read_stage_graphs(os.path.join(out, "stages.json.gz"))
    keys = [s["graph"] for t in report["targets"].values() for s in t["stages"]["steps"]
            if s["graph"] not in (None, "final")]
    assert set(keys) == set(graphs)            # every stored graph is named by a step, and every name resolves
    # The captured ONNX every ORT-family target imports is one graph, not one per target.
    imports = {_steps(report, t)[0]["graph"] for t in ("ort-cpu", "ort-nnapi", "ort-coreml")}
    assert len(imports) == 1
    # A node that several step graphs share (most of ORT's, level after level) is stored once.
    raw = json.loads(gzip.decompress(open(os.path.join(out, "stages.json.gz"), "rb").read()))
    assert raw["format"] == 2 and len(raw["nodes"]) < sum(len(g["nodes"]) for g in graphs.values())
    # report.json names graphs; it does not hold them.
    assert all(isinstance(s["graph"], (str, type(None))) for t in report["targets"].values()
               for s in t["stages"]["steps"])


@pytest.mark.slow
def test_first_divergence_names_the_stage_where_targets_part_ways(sample_report):
    """ORT and OpenVINO fold BatchNorm into the Conv while optimising the graph; coremltools keeps them apart
    until its fuse_conv_batchnorm pass; ORT and OpenVINO then also fuse the ReLU6 (Clip), Core ML does not."""
    from xc_core.views.rows import divergence_rows
    report, _ = sample_report("vision-mini")
    rows = {r["source op"]: r for r in divergence_rows(report, "ort-cpu", "coreml-ane", only_diverging=False)}
    assert rows["conv2d"]["first diverges at"] == "Graph optimisation"
    assert rows["conv2d"]["ort-cpu"] == "with batch_norm" and rows["conv2d"]["coreml-ane"] == "alone"
    same = {r["source op"]: r for r in divergence_rows(report, "ort-cpu", "openvino-cpu", only_diverging=False)}
    assert same["hardtanh"]["first diverges at"] != "Fusion"       # both fuse conv + bn + relu6
    across = {r["source op"]: r for r in divergence_rows(report)}
    assert set(across) <= {n["id"] for n in report["capture"]["graph"]["nodes"]}
    assert "coreml-ane" in across["conv2d"]["how the targets split there"]


@pytest.mark.slow
def test_layout_audit_lists_openvino_reorders_with_layouts_and_bytes(sample_report):
    import numpy as np
    report, _ = sample_report("vision-mini")
    lay = report["targets"]["openvino-cpu"]["layout"]
    reorders = [m for m in lay["moves"] if m["op_type"] == "Reorder"]
    assert reorders and lay["move_count"] == len(lay["moves"])
    for m in reorders:
        assert m["from"] and m["to"], m
        dtype = {"f32": np.float32, "bf16": np.float16, "f16": np.float16}.get(m["dtype"], np.float32)
        assert m["bytes"] == int(np.prod(m["shape"])) * np.dtype(dtype).itemsize, m
    # The input image goes from NCHW to the NHWC the convolutions run in.
    assert any(m["from"].startswith("NCHW") and m["to"].startswith("NHWC") for m in reorders)
    assert lay["transitions"] and lay["bytes_moved"] == sum(m["bytes"] for m in lay["moves"] if m["bytes"])
    ort_moves = report["targets"]["ort-cpu"]["layout"]["moves"]
    assert {m["op_type"] for m in ort_moves} == {"ReorderInput", "ReorderOutput"}


@pytest.mark.slow
def test_stage_views_render_every_target_and_add_step_graphs_as_panes(sample_report):
    from xc_core.views.rows import stage_graph_choices, stage_matrix, with_stage_graphs
    report, out = sample_report("vision-mini")
    matrix = stage_matrix(report)
    assert [r["stage"] for r in matrix] == ["Import", "Graph optimisation", "Fusion", "Backend selection",
                                            "Kernel lowering", "Fallback insertion"]
    assert all(r[t] for r in matrix for t in report["targets"])
    assert "partition" in matrix[3]["ort-nnapi"]
    choices = stage_graph_choices(report)
    basic = next(c for c in choices if c[0] == "ort-cpu" and "BASIC" in c[2])
    graphs = read_stage_graphs(os.path.join(out, "stages.json.gz"))
    view = with_stage_graphs(report, graphs, [basic])
    assert basic[2] in view["targets"] and basic[2] not in report["targets"]
    row = next(r for r in view["alignment"]["source_ops"] if r["source_op"] == "conv2d")
    assert row["targets"][basic[2]]["fused_with"] == ["batch_norm"]


@pytest.mark.slow
def test_core_ml_on_an_onnx_upload_keeps_each_op_s_own_provenance_through_its_fp16_casts(tmp_path):
    """The ONNX route (onnx2torch → TorchScript) names vars like `input.3`; the fp16 casts are named after the
    tensor they cast. Neither may smear one op's source op over its neighbours: on a Conv → SiLU detector each
    conv carries its Conv, each silu (the ML program backend's own fusion) its Sigmoid and Mul."""
    from realistic_models import detector_onnx
    from xc_core.api import analyze
    report = analyze(detector_onnx(str(tmp_path / "det.onnx")), ["coreml-ane"], out_dir=str(tmp_path / "out"))
    t = report["targets"]["coreml-ane"]
    assert t["status"] == "ok", t["error"]
    by_type = {}
    for n in t["graph"]["nodes"]:
        if n["kind"] == "compute":
            by_type.setdefault(n["op_type"], set()).add(tuple(sorted(
                next(r["op_type"] for r in report["alignment"]["source_ops"] if r["source_op"] == s)
                for s in n["source_ops"])))
    assert by_type["conv"] == {("Conv",)}
    assert by_type["silu"] == {("Mul", "Sigmoid")}
    backend = [s for s in _steps(report, "coreml-ane") if s["name"].startswith("ML program backend passes")]
    assert backend and backend[0]["stage"] == FUSION and backend[0]["op_count"] < backend[0]["counts"]["ops_before"]
    # The graph-optimisation snapshot (after the fp16 casts) keeps ops apart as the program does.
    graphs = read_stage_graphs(str(tmp_path / "out" / "stages.json.gz"))
    snap = next(s for s in _steps(report, "coreml-ane") if s.get("ends_stage") == GRAPH_OPT)
    assert all(len(n["source_ops"]) <= 1 for n in graphs[snap["graph"]]["nodes"] if n["kind"] == "compute")


@pytest.mark.slow
def test_a_report_from_before_steps_were_recorded_renders_without_them(sample_report):
    """Runs in the store or report.json files from CI may predate steps (their Core ML `stages` was a list of
    graphs): every view leaves the stages out instead of failing."""
    import copy
    from xc_core.review.diff import diff_reports
    from xc_core.review.html import report_html
    from xc_core.review.markdown import report_markdown
    from xc_core.views.rows import divergence_rows, layout_summary_rows, stage_graph_choices, stage_matrix
    report, _ = sample_report("vision-mini")
    old = copy.deepcopy(report)
    for t in old["targets"].values():
        t["stages"] = [] if t["id"].startswith("coreml") else None
        t.pop("layout", None)
    old.pop("divergence"), old.pop("stage_graphs")
    assert stage_matrix(old) == [] and stage_graph_choices(old) == [] and divergence_rows(old) == []
    assert layout_summary_rows(old) == []
    assert "Lowering stages" not in report_markdown(old)
    assert "No target recorded its lowering steps" in report_html(old)
    assert all(not t["stage_changes"] for t in diff_reports(old, report)["targets"].values())
