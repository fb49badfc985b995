"""What a stakeholder sees first, as data: checklist verdicts with the Markdown report's symbols and colours, a
verdict line per target, heat-map rows that skip single-child wrappers, a target that did not compile as a
labelled empty column, and the Downloads page's groups and Model Explorer command. No Streamlit here."""
import io
import json
import os
import shlex
import zipfile

import pytest

from xc_core.views import fallbacks
from xc_core.views import rows as views
from xc_core.views.figures import heatmap_figure
from xc_core.analysis.checklist import VERDICT

HOSTILE = '<img src=x onerror=alert(1)>'


def _node(nid, backend="cpu", fallback=False, kind="compute"):
    return {"id": nid, "op_type": "Op", "kind": kind, "backend": backend, "fallback": fallback}


def _item(qid, verdict):
    return {"id": qid, "question": f"question {qid}?", "page": "overview", "verdict": verdict,
            "evidence": "measured", "detail": "…"}


def _report():
    """Three targets: an accelerated one with two fallbacks and fp16, a CPU one that matches, one that crashed."""
    paths = {"a": "model.vit.embeddings.proj", "b": "model.vit.encoder.layer.0.attn",
             "c": "model.vit.encoder.layer.1.attn", "d": "model.classifier"}
    rows = [{"source_op": op, "op_type": "Op", "module_path": path,
             "targets": {"npu": {"status": "fallback" if op == "b" else "present",
                                 "backend": "cpu" if op == "b" else "npu", "fallback_reason": "unsupported op"},
                         "cpu": {"status": "present", "backend": "cpu"}}}
            for op, path in paths.items()]
    return {
        "targets": {
            "npu": {"status": "ok", "error": None, "label": "NPU", "op_count_before": 4, "op_count_after": 4,
                    "graph": {"evidence": "predicted-runtime",
                              "nodes": [_node("n1", "npu"), _node("n2", fallback=True), _node("n3", fallback=True)]},
                    "precision": {"mix": {"fp16": 3, "fp32": 1}},
                    "drift": {"worst": {"rel_l2": 2e-4, "output": "logits"}}},
            "cpu": {"status": "ok", "error": None, "label": "CPU", "op_count_before": 4, "op_count_after": 2,
                    "graph": {"evidence": "reported", "nodes": [_node("c1")]},
                    "precision": {"mix": {"fp32": 1}}, "drift": {"worst": {"rel_l2": 5e-3, "output": "logits"}}},
            HOSTILE: {"status": "error", "label": "X", "graph": None,
                      "error": f"compile failed: killed by SIGSEGV in compile while reading {HOSTILE}"},
        },
        "checklist": {"targets": {
            "npu": [_item(1, "pass"), _item(2, "fail"), _item(3, "pass"), _item(4, "pass"), _item(5, "warn")],
            "cpu": [_item(1, "pass"), _item(2, "not applicable"), _item(3, "pass"), _item(4, "warn"),
                    _item(5, "pass")],
            HOSTILE: [_item(q, "not applicable") for q in range(1, 6)]}},
        "alignment": {"source_ops": rows},
    }


# --- verdicts -----------------------------------------------------------------------------------------------

def test_checklist_grid_uses_the_markdown_reports_symbols():
    grid = views.checklist_grid(_report())
    assert grid[0] == {"target": "npu", "(1) report read": "✓ pass", "(2) CPU fallback": "✗ FAIL",
                       "(3) fusions fired": "✓ pass", "(4) outputs match": "✓ pass", "(5) same precision": "⚠ warn"}
    assert {c for r in grid for k, c in r.items() if k != "target"} <= set(VERDICT.values())


def test_tally_puts_the_worst_first_and_says_when_nothing_was_judged():
    r = _report()
    assert views.checklist_tally(r, "npu") == "✗ 1 FAIL · ⚠ 1 warn"
    assert views.checklist_tally(r, "cpu") == "⚠ 1 warn"
    assert views.checklist_tally(r, HOSTILE) == "– n/a"
    r = _report()       # a changed report is a new dict: the views read a report dict once (typed_report.as_report)
    r["checklist"]["targets"]["cpu"][3]["verdict"] = "pass"
    assert views.checklist_tally(r, "cpu") == "✓ pass"


def test_one_line_verdict_per_target():
    lines = dict(views.verdict_lines(_report()))
    assert lines["npu"] == "✗ FAIL 2 ops fall back to the CPU · ✓ pass outputs match · ⚠ warn runs fp16"
    assert lines["cpu"] == "⚠ warn outputs drift (rel L2 5.00e-03)"
    # A target that did not compile: its status and the start of its error, cut at a word.
    assert lines[HOSTILE] == "error: compile failed: killed by SIGSEGV in compile while reading <img src=x …"
    assert list(lines) == ["npu", "cpu", HOSTILE]                       # every target, in the report's order


def test_verdict_cells_are_coloured_escaped_and_kept_on_one_line():
    rows = [{"target": "a*b", "checklist": "✗ 1 FAIL · ⚠ 2 warn", "ops": "53 → 41"},
            {"target": "c", "checklist": "✓ pass", "ops": "1 → 1"}]
    styler = views.style_verdicts(rows, ["checklist"], nowrap=("ops",), text=lambda s: str(s).replace("*", "\\*"))
    assert list(styler.data["target"]) == ["a\\*b", "c"]                 # every cell went through `text`
    html = styler.set_uuid("t").to_html()
    assert "#T_t_row0_col1 {\n  background-color: " + views.VERDICT_BACKGROUND["fail"] in html
    assert "#T_t_row1_col1 {\n  background-color: " + views.VERDICT_BACKGROUND["pass"] in html
    assert "#T_t_row0_col0 {" not in html                                # the target column is not a verdict
    assert "#T_t td.col2 *" in html and "white-space: nowrap" in html


def test_summary_table_carries_the_checklist_tally():
    r = _report()
    for tid in r["targets"]:
        r["targets"][tid].setdefault("fusions", None)
    rows = views.target_summary_rows(r)
    assert [row["checklist"] for row in rows] == ["✗ 1 FAIL · ⚠ 1 warn", "⚠ 1 warn", "failed: its error is below"]
    assert list(rows[0])[:2] == ["target", "checklist"]


# --- heat map -----------------------------------------------------------------------------------------------

def test_depth_counts_only_levels_where_the_modules_branch():
    paths = ["model.vit.embeddings.proj", "model.vit.encoder.layer.0.attn", "model.vit.encoder.layer.1.attn",
             "model.vit.layernorm", "model.classifier"]
    # `model` has one child-free sibling (classifier) at depth 1; `model` itself is a wrapper: no level.
    assert set(views.module_rows(paths, 1).values()) == {"model.vit", "model.classifier"}
    assert set(views.module_rows(paths, 2).values()) == {"model.vit.embeddings", "model.vit.encoder",
                                                         "model.vit.layernorm", "model.classifier"}
    # encoder → layer is a single child: depth 3 goes straight to the layers.
    assert views.module_rows(paths, 3)["model.vit.encoder.layer.1.attn"] == "model.vit.encoder.layer.1"
    # Ops on a module itself make it branch; ops on no module are the root's row.
    assert views.module_rows(["a.b.c", "a", ""], 1) == {"a.b.c": "a", "a": "a", "": "(root)"}
    assert views.module_rows(["a.b.c", "a", ""], 2)["a.b.c"] == "a.b"
    assert views.module_rows(["a.b.c", "a", ""], 3)["a.b.c"] == "a.b.c"      # b → c: no level of its own


def test_module_depth_is_the_deepest_branching_level():
    r = _report()
    assert views.module_depth(r) == 3          # model → {vit, classifier} → {embeddings, encoder} → layer.{0, 1}
    labels, _, _ = views.heatmap_rows(r, depth=2)
    assert labels == ["model.vit.embeddings", "model.vit.encoder", "model.classifier"]


def test_a_target_that_did_not_compile_is_a_labelled_empty_column():
    r = _report()
    labels, targets, cells = views.heatmap_rows(r, depth=1)
    assert targets == ["npu", "cpu", HOSTILE]
    assert all(line[2]["category"] is None for line in cells)
    assert [line[0]["category"] for line in cells] == ["CPU fallback", "accelerator"]
    fig = heatmap_figure(r, depth=1)
    x = list(fig.data[0].x)
    assert len(x) == 3 and x[2].startswith("&lt;img src=x onerror=alert(1)&gt;<br>error: compile failed: killed")
    assert x[2].endswith(" …") and "<img" not in "".join(x) + "".join(str(t) for row in fig.data[0].text for t in row)
    assert [row[2] for row in fig.data[0].z] == [None, None]
    # Filters compare the targets that have cells: an empty column makes no row differ.
    r["alignment"]["source_ops"][3]["targets"]["npu"]["backend"] = "cpu"        # model.classifier: CPU on both
    assert list(heatmap_figure(r, depth=1, only_diff=True).data[0].y) == ["model.vit"]


def test_accelerated_and_core_ml_targets_that_did_not_compile():
    targets = {tid: {"status": "error", "error": "boom", "graph": None, "id": tid.split("[")[0]}
               for tid in ("ort-nnapi", "ort-cpu", "coreml-ane", "coreml-cpu", "coreml-ane[compute_units=CPU_ONLY]",
                           "someone-elses-target")}
    targets["ort-coreml"] = {"status": "ok", "graph": {"nodes": []}, "id": "ort-coreml"}
    r = {"targets": targets}
    assert set(fallbacks.not_compiled_accelerated(r)) == {"ort-nnapi", "coreml-ane"}
    assert set(views.not_compiled_coreml(r)) == {"coreml-ane", "coreml-cpu", "coreml-ane[compute_units=CPU_ONLY]"}
    assert views.not_compiled(r)["ort-cpu"] == "error: boom"


# --- downloads ----------------------------------------------------------------------------------------------

def test_artifact_groups_label_openvinos_two_models_and_leave_model_explorer_to_its_zip():
    ov_dir = "artifacts/openvino-cpu--precision-f32"
    r = {"targets": {"ort-cpu": {"label": "ORT CPU", "id": "ort-cpu"},
                     "openvino-cpu[precision=f32]": {"label": "OpenVINO", "id": "openvino-cpu",
                                                     "artifacts": [f"{ov_dir}/runtime_model.xml"]}}}
    rels = ["report.json", "inputs.npz", "model_explorer/index.json", "model_explorer/ort-cpu.graph.json",
            "artifacts/openvino-cpu--precision-f32/model.xml", "artifacts/openvino-cpu--precision-f32/model.bin",
            "artifacts/openvino-cpu--precision-f32/runtime_model.xml",
            "artifacts/openvino-cpu--precision-f32/runtime_model.bin", "artifacts/ort-cpu/model.optimized.onnx"]
    groups = views.artifact_groups(r, rels)
    names = [g["group"] for g in groups]
    # A variant's folder is matched to its target through the report's artifact paths: its title, its notes.
    assert names == ["ort-cpu", "openvino-cpu--precision-f32", "inputs"]
    assert groups[1]["title"] == "openvino-cpu[precision=f32] — OpenVINO"
    assert "model_explorer" not in names and not any("report.json" in str(g) for g in groups)
    ov = groups[1]
    notes = [note for note, _ in ov["parts"]]
    from xc_core.targets import artifact_notes
    assert notes == [artifact_notes("openvino-cpu")["runtime_model.xml"], artifact_notes("openvino-cpu")["model.xml"]]
    assert "Netron" in notes[0] and "not loadable by read_model" in notes[0]
    assert "loadable by openvino.Core().read_model" in notes[1]
    assert [f["label"] for f in ov["parts"][1][1]] == ["model.bin", "model.xml"]


def test_model_explorer_zip_and_the_command_that_opens_it(tmp_path, monkeypatch):
    """The export is built from the report when asked for: the command names files the zip holds, and Model
    Explorer's own parser reads it."""
    import sys
    monkeypatch.setattr(sys, "argv", ["model-explorer"])     # the module parses sys.argv when imported
    cmdline = pytest.importorskip("model_explorer.cmdline")
    from test_model_explorer import tiny_report
    from xc_core.export.model_explorer import model_explorer_zip, write_model_explorer
    report = tiny_report()
    command = views.model_explorer_command(report)
    first, second = command.split(" && ")
    assert first == f"unzip {views.MODEL_EXPLORER_ZIP}"
    # The package's own parser reads the command; every file it names is in the zip.
    argv = shlex.split(second)
    assert argv[0] == "model-explorer"
    args = cmdline.parser.parse_args(argv[1:])
    models = args.model_paths[0].split(",")
    assert models == ["model_explorer/cpu.graph.json", "model_explorer/npu_fp16_True.graph.json"]
    assert args.node_data_paths == "model_explorer/cpu.backend.nodedata.json"
    out = tmp_path / views.MODEL_EXPLORER_ZIP
    out.write_bytes(model_explorer_zip(report))
    written = write_model_explorer(report, str(tmp_path / "folder"))
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
        assert set(models) | {args.node_data_paths} <= names
        assert names == {f"model_explorer/{os.path.basename(p)}" for p in written}
        index = json.loads(z.read("model_explorer/index.json"))
    assert index == json.loads((tmp_path / "folder" / "index.json").read_text())
    # A report with no compiled graph: no command; an export that fails is a zip saying why, not an exception.
    assert views.model_explorer_command({"targets": {"x": {"status": "error"}}}) == ""
    monkeypatch.setattr("xc_core.export.model_explorer._collect_graphs", lambda r: 1 / 0)
    with zipfile.ZipFile(io.BytesIO(model_explorer_zip(report))) as z:
        assert z.namelist() == ["model_explorer/ERROR.txt"]
        assert "ZeroDivisionError" in z.read("model_explorer/ERROR.txt").decode()
