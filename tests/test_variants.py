"""Compiler flags are part of the artifact: a target listed again with other options is a variant, its own column,
compiled with those options for real, and each option is one the toolchain has."""
import os

import onnx
import pytest

from xc_core.errors import XcInputError
from xc_core.targets import make_targets, parse_target_list, parse_target_options, parse_target_spec, \
    split_target_list


def test_commas_inside_brackets_belong_to_the_variant():
    assert split_target_list("ort-cpu, ort-nnapi[fp16=true,bandwidth_gb_s=8],coreml-ane") == \
        ["ort-cpu", "ort-nnapi[fp16=true,bandwidth_gb_s=8]", "coreml-ane"]


def test_specs_resolve_aliases_and_check_values():
    assert parse_target_spec("openvino-cpu[precision=f32]") == ("openvino-cpu", {"inference_precision": "f32"})
    assert parse_target_spec("ort-cpu[level=BASIC]") == ("ort-cpu", {"level": "basic"})
    assert parse_target_list("ort-cpu,ort-cpu[level=basic],ort-cpu") == ["ort-cpu", "ort-cpu[level=basic]"]
    for bad, words in (("ort-cpu[level=max]", "ort-cpu level=max is not accepted; accepted: disabled, basic"),
                       ("ort-cpu[speed=1]", "ort-cpu takes no option 'speed'; it takes level"),
                       ("ort-cpu[level=basic", "expected ID[KEY=VALUE,...]"),
                       ("coreml-ane[compute_units=NPU]", "accepted: ALL, CPU_AND_NE, CPU_AND_GPU, CPU_ONLY"),
                       ("nope[level=basic]", "unknown target 'nope'")):
        with pytest.raises(XcInputError, match=words.replace("[", r"\[")) as e:
            parse_target_list(bad)
        assert "\n" not in str(e.value)


def test_an_option_for_an_id_reaches_every_variant_that_does_not_set_it():
    targets = parse_target_list("ort-cpu,ort-cpu[level=basic]")
    options = parse_target_options(["ort-cpu.level=extended"], targets)
    assert [t.identity for t in make_targets(targets, options)] == ["ort-cpu[level=extended]",
                                                                    "ort-cpu[level=basic]"]
    with pytest.raises(XcInputError, match="not among --targets"):
        parse_target_options(["openvino-cpu.precision=f32"], targets)


@pytest.fixture(scope="module")
def variants_report(tmp_path_factory):
    from xc_core.api import analyze
    out = tmp_path_factory.mktemp("variants")
    targets = parse_target_list("ort-cpu,ort-cpu[level=basic],openvino-cpu[precision=f32],coreml-ane,"
                                "coreml-ane[precision=fp32,compute_units=CPU_AND_NE],ort-coreml[fp16=false],"
                                "ort-coreml[fp16=false,model_format=NeuralNetwork]")
    return analyze("sample:vision-mini", targets, out_dir=str(out)), str(out)


def test_ort_levels_are_two_columns_whose_fusions_differ_as_ort_says(variants_report):
    import onnxruntime as ort
    report, out = variants_report
    full, basic = report["targets"]["ort-cpu"], report["targets"]["ort-cpu[level=basic]"]
    assert full["status"] == basic["status"] == "ok"
    assert basic["info"]["optimization_level"] == "ORT_ENABLE_BASIC"
    assert basic["fusions"]["count"] < full["fusions"]["count"]
    # The op count is ORT's own: the optimized model it writes at that level, counted directly.
    for block, level in ((full, "ORT_ENABLE_ALL"), (basic, "ORT_ENABLE_BASIC")):
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        so.optimized_model_filepath = os.path.join(out, f"direct-{level}.onnx")
        ort.InferenceSession(os.path.join(out, "artifacts", "capture", "model.onnx"), so,
                             providers=["CPUExecutionProvider"])
        direct = onnx.load(so.optimized_model_filepath).graph.node
        # NCHWc reorders are layout moves, not compute (xc lists them apart); at level basic there are none.
        compute = [n for n in direct if n.op_type not in ("Constant", "ReorderInput", "ReorderOutput")]
        assert block["op_count_after"] == len(compute), level
    # Level 1 implements no Conv+activation fusion: the basic column is judged by the Level-1 catalogue.
    patterns = {e["pattern"] for e in basic["fusions"]["catalogue"]["entries"]}
    assert patterns and not any("Relu" in p or "Activation" in p for p in patterns)
    assert os.path.isdir(os.path.join(out, "artifacts", "ort-cpu--level-basic"))


def test_openvino_precision_and_core_ml_options_are_compiled_for_real(variants_report):
    report, _ = variants_report
    ov = report["targets"]["openvino-cpu[inference_precision=f32]"]
    assert ov["status"] == "ok" and ov["info"]["inference_precision"] == "f32"
    assert set(ov["precision"]["mix"]) <= {"fp32", "int32", "int64"}
    fp16, fp32 = report["targets"]["coreml-ane"], report["targets"]["coreml-ane[compute_units=CPU_AND_NE,precision=fp32]"]
    assert fp16["info"]["compute_precision"] == "fp16" and fp32["info"]["compute_precision"] == "fp32"
    assert "fp16" in fp16["precision"]["mix"] and "fp16" not in fp32["precision"]["mix"]
    # fp32 ops cannot run on the ANE, and CPU_AND_NE allows no GPU: the rule table puts them on the CPU.
    assert fp32["info"]["compute_units"] == "CPU_AND_NE"
    assert {n["backend"] for n in fp32["graph"]["nodes"] if n["kind"] == "compute"} == {"cpu"}
    assert fp32["drift"]["worst"]["rel_l2"] < fp16["drift"]["worst"]["rel_l2"]


def test_variants_of_one_target_are_the_first_pair_on_the_overview(variants_report):
    from xc_core.views.rows import default_pairs
    report, _ = variants_report
    assert default_pairs(report)[0] == ("ort-cpu", "ort-cpu[level=basic]")


def test_the_coreml_eps_model_format_picks_orts_op_list_for_that_format(variants_report):
    """ORT's checker keeps one supported-op list per Core ML model format; each variant is checked against its own,
    on the graph the EP would see (checked directly here)."""
    from onnxruntime.tools.mobile_helpers.usability_checker import check_coreml_partitions
    report, out = variants_report
    for tid, config in (("ort-coreml[fp16=False]", "mlprogram"),
                        ("ort-coreml[fp16=False,model_format=NeuralNetwork]", "neuralnetwork")):
        t = report["targets"][tid]
        assert t["status"] == "ok", t["error"]
        basic = next(os.path.join(out, a) for a in t["artifacts"] if a.endswith("model.basic.onnx"))
        direct = check_coreml_partitions(onnx.load(basic), require_fixed_input_sizes=True,
                                         config_filename=f"coreml_supported_{config}_ops.md")
        part = t["info"]["partitioning"]
        assert (part["num_supported_nodes"], part["num_partitions"]) == (direct.num_supported_nodes,
                                                                         direct.num_partitions), tid
    ml, nn = (report["targets"][t]["info"]["partitioning"]["unsupported_ops"] for t in
              ("ort-coreml[fp16=False]", "ort-coreml[fp16=False,model_format=NeuralNetwork]"))
    assert ml != nn
