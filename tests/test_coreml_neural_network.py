"""Core ML neuralNetwork models (the format before ML programs) are read, never refused for their age (issue 51):
layers, shapes and weight precisions from the spec, compute units predicted by cited rules, numerics said not run;
as an .mlmodel and as a zipped .mlpackage, through xc's real pipeline, into the report, CLI and Markdown."""
import json
import os
import shutil
import warnings

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")


def _network(fp16: bool = True, dilated: bool = False):
    """image[3,8,8] → conv (3x3, 4 ch) → ReLU → global mean; plus a gather-free second output through max pooling:
    two outputs, one dilated conv when asked (the ANE rule's CPU case)."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder
    rng = np.random.default_rng(0)
    b = NeuralNetworkBuilder([("image", datatypes.Array(3, 8, 8))], [("pooled", None), ("score", None)],
                             disable_rank5_shape_mapping=True)
    b.add_convolution("conv1", kernel_channels=3, output_channels=4, height=3, width=3, stride_height=1,
                      stride_width=1, border_mode="same", groups=1, W=rng.random((3, 3, 3, 4), np.float32),
                      b=np.zeros(4, np.float32), has_bias=True, input_name="image", output_name="c1",
                      dilation_factors=[2, 2] if dilated else [1, 1])
    b.add_activation("relu1", "RELU", "c1", "r1")
    b.add_pooling("pool1", height=2, width=2, stride_height=2, stride_width=2, layer_type="MAX",
                  padding_type="VALID", input_name="r1", output_name="pooled")
    b.add_reduce_mean("mean1", "r1", "score", axes=[1, 2], keepdims=False)
    model = ct.models.MLModel(b.spec, skip_model_load=True)
    if fp16:
        from coremltools.models.neural_network.quantization_utils import quantize_weights
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = quantize_weights(model, nbits=16)
    return model


def test_an_fp16_mlmodel_is_read_with_layers_units_and_precision(tmp_path):
    from xc_core.api import analyze
    from xc_core.cli import inputs_table
    from xc_core.review.markdown import report_markdown
    path = tmp_path / "old_style.mlmodel"
    _network().save(str(path))
    report = analyze(str(path), ["coreml-ane", "coreml-cpu"], out_dir=str(tmp_path / "out"))
    src = report["source"]
    assert src["kind"] == "coreml" and src["metadata"]["coreml_type"] == "neuralNetwork"
    assert src["metadata"]["weight_precisions"] == {"fp16": 1} and src["metadata"]["layers"] == 4
    assert src["inputs"][0]["shape"] == [3, 8, 8]
    ane = report["targets"]["coreml-ane"]
    assert ane["status"] == "ok", ane["error"]
    nodes = {n["id"]: n for n in ane["graph"]["nodes"]}
    assert set(nodes) == {"conv1", "relu1", "pool1", "mean1"}
    assert nodes["conv1"]["attributes"]["weight_dtypes"] == ["fp16"] and nodes["conv1"]["backend"] == "ane"
    assert nodes["pool1"]["backend"] == "ane" and "neuralNetwork" in nodes["relu1"]["attributes"]["unit_reason"]
    assert all(n["attributes"]["unit_source"] for n in nodes.values())          # every prediction cites its rule
    units = ane["info"]["compute_units_predicted"]
    assert units["evidence"] == "predicted-rules" and units["share"] == {"ane": 1.0}
    cpu = report["targets"]["coreml-cpu"]
    assert {n["backend"] for n in cpu["graph"]["nodes"]} == {"cpu"}
    assert {n["precision"] for n in cpu["graph"]["nodes"]} == {"fp32"}
    assert not (ane.get("drift") or {}).get("outputs")                           # nothing run, nothing compared
    assert "neuralNetwork model" in inputs_table(report) and "fp16 in 1 layer" in inputs_table(report)
    md = report_markdown(report)
    assert "Core ML neuralNetwork model" in md and "coreml-ane" in md
    from xc_core.report.schema import validate_report
    validate_report(json.loads(json.dumps(report)))
    from test_pages import _page_with_report
    at = _page_with_report("coreml", report)                       # the Core ML page: units per layer
    assert any("ANE 100%" in c.value for c in at.caption)
    at = _page_with_report("overview", report)
    assert any("neuralNetwork" in c.value for c in at.caption)


def test_a_dilated_conv_is_predicted_on_the_cpu_with_its_cited_reason(tmp_path):
    from xc_core.sources import load_source
    from xc_core.targets.coreml_rules import CPU, predict_neural_network_layer
    path = tmp_path / "dilated.mlmodel"
    _network(fp16=False, dilated=True).save(str(path))
    src = load_source(str(path))
    src.close()                                  # the loader's scratch folder; the graph stays in memory
    conv = next(n for n in src.coreml_graph.nodes if n.id == "conv1")
    assert conv.attributes["dilations"] == [2, 2] and conv.attributes["weight_dtypes"] == ["fp32"]
    p = predict_neural_network_layer(conv.op_type, "ALL", conv.attributes)
    assert p.unit == CPU and "dilated" in p.reason and "hollance" in p.source
    assert src.metadata["weight_precisions"] == {"fp32": 1}


def test_a_zipped_mlpackage_holding_a_neural_network_is_read(tmp_path):
    from xc_core.sources import load_source
    package = tmp_path / "pkg" / "old.mlpackage"
    package.parent.mkdir()
    try:
        _network().save(str(package))
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"coremltools does not write a neuralNetwork as .mlpackage here: {e}")
    archive = shutil.make_archive(str(tmp_path / "old.mlpackage"), "zip", str(package.parent), "old.mlpackage")
    src = load_source(archive)
    try:
        assert src.kind == "coreml" and src.metadata["coreml_type"] == "neuralNetwork"
        assert [n.id for n in src.coreml_graph.nodes] == ["conv1", "relu1", "pool1", "mean1"]
    finally:
        src.close()
    assert os.path.exists(archive)


def test_a_classifier_with_an_image_input_keeps_its_class_labels(tmp_path):
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    from xc_core.sources import load_source
    b = NeuralNetworkBuilder([("image", datatypes.Array(3, 4, 4))], [("probs", datatypes.Array(3))], mode="classifier")
    b.add_flatten("flat", 0, "image", "f")
    b.add_inner_product("fc", W=np.ones((3, 48), np.float32), b=None, input_channels=48, output_channels=3,
                        has_bias=False, input_name="f", output_name="logits")
    b.add_softmax("sm", "logits", "probs")
    b.set_class_labels(["cat", "dog", "bird"], predicted_feature_name="label", prediction_blob="probs")
    b.set_pre_processing_parameters(image_input_names=["image"], image_scale=1 / 255.0)
    path = tmp_path / "classifier.mlmodel"
    ct.models.MLModel(b.spec, skip_model_load=True).save(str(path))
    src = load_source(str(path))
    src.close()
    assert src.metadata["coreml_type"] == "neuralNetworkClassifier"
    assert src.metadata["class_labels"] == {"count": 3, "first": ["cat", "dog", "bird"]}
    assert [(i.name, i.shape) for i in src.inputs] == [("image", [1, 3, 4, 4])]          # an image, as NCHW
    assert next(n for n in src.coreml_graph.nodes if n.id == "fc").attributes["channels"] == [48, 3]


def test_rule_table_for_layers_cites_and_leaves_unknown_layers_unknown():
    from xc_core.targets.coreml_rules import ANE, CPU, UNKNOWN, predict_neural_network_layer
    assert predict_neural_network_layer("innerProduct", "ALL").unit == ANE
    assert predict_neural_network_layer("uniDirectionalLSTM", "ALL").unit == CPU
    assert predict_neural_network_layer("custom", "ALL").unit == CPU
    p = predict_neural_network_layer("crop", "ALL")
    assert p.unit == UNKNOWN and not p.source
    assert predict_neural_network_layer("convolution", "CPU_AND_GPU").unit == "gpu"
