"""The model diff checked by mutation against models xc did not write — a fast fixed slice of
bench/model_diff_conformance.py: ONNX node tests (single ops, function-expanded graphs of tens of nodes, control
flow), model folders and light architectures the onnx wheel ships, and a flat transformer built in code. Each gets
every kind of edit (none, renamed nodes, renamed tensors, renamed initializers, a weight × 1.1 with and without
values, an attribute, an inserted Identity, a swapped op); the diff must report exactly that edit and nothing else."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import model_diff_conformance as conformance  # noqa: E402

SLICE = [
    # single ops: attributes that change output shapes (strides, pads, axis, keepdims), dtypes (Cast), RNNs
    "test_relu", "test_conv_with_strides_padding", "test_leakyrelu", "test_flatten_axis1",
    "test_cast_FLOAT_to_DOUBLE", "test_reduce_sum_keepdims_example", "test_gemm_default_matrix_bias",
    "test_averagepool_2d_strides", "test_softmax_axis_1", "test_batchnorm_example", "test_lstm_defaults",
    "test_gru_defaults", "test_einsum_batch_matmul", "test_maxpool_2d_pads", "test_conv_with_autopad_same",
    "test_convtranspose", "test_layer_normalization_2d_axis0", "test_bitshift_left_uint8",
    # function-expanded graphs: unnamed nodes, repeated op types, Constant nodes
    "test_layer_normalization_4d_axis0_expanded", "test_softmax_example_expanded", "test_gelu_tanh_2_expanded",
    "test_hardswish_expanded", "test_mish_expanded", "test_group_normalization_example_expanded",
    "test_celu_expanded", "test_range_float_type_positive_delta_expanded", "test_thresholdedrelu_expanded_ver18",
    "test_selu_expanded_ver18", "test_swish_expanded", "test_clip_default_min_expanded",
    # control flow (subgraphs)
    "test_if", "test_loop11", "test_scan_sum",
    # shipped model folders and architectures, and a model built in code
    "pytorch-converted/test_Conv2d", "pytorch-converted/test_Linear", "pytorch-operator/test_operator_maxpool",
    "light/light_squeezenet", "light/light_inception_v1", "built/flat_transformer_4",
    # what the full run once found wrong: a one-node graph whose op is swapped (was: "unrelated"); unread Constant
    # tensors renamed (was: removed + added); an Identity after a Constant (was: a weight removed from the old
    # reader); downstream shape changes (were: matched Expand/Concat nodes turned into added + removed)
    "test_add", "test_attention_4d_expanded", "test_rotary_embedding_no_position_ids_expanded",
    "test_attention_4d_causal_with_past_and_present_expanded",
    # an initializer no node reads, renamed (was: removed + added with equal sha256)
    "light/light_zfnet512",
]
# Few node tests have initializers: the kinds that need one are tried on fewer models of the slice.
LEAST_TRIED = {"rename-weights": 4, "rename-tensors": 8}


@pytest.fixture(scope="module")
def outcomes() -> dict:
    import warnings
    warnings.simplefilter("ignore")
    wanted = set(SLICE)
    pattern = "^(" + "|".join(name.replace(".", r"\.") for name in sorted(wanted)) + ")$"
    models = conformance.corpus(pattern)
    assert {name for name, _, _ in models} == wanted
    return {(o.model, o.kind): o for name, model, inputs in models
            for o in conformance.run_model(name, model, inputs)}


def _show(wrong) -> str:
    return "\n".join(f"{o.model}: {o.what}\n    " + "\n    ".join(o.problems) for o in wrong)


@pytest.mark.parametrize("kind", conformance.KINDS)
def test_the_diff_reports_exactly_the_edit(outcomes, kind):
    mine = [o for (model, k), o in outcomes.items() if k == kind ]
    tried = [o for o in mine if o.status != "skipped"]
    # the slice gives every kind of edit real work (a kind skipped everywhere would pass for nothing)
    assert len(tried) >= LEAST_TRIED.get(kind, 10), [(o.model, o.problems) for o in mine]
    wrong = [o for o in tried if o.status == "wrong"]
    assert not wrong, _show(wrong)


def _leaky_relu_edit(kind: str):
    case = conformance.node_test_cases()["test_leakyrelu"]
    inputs = conformance._input_arrays(case.data_sets[0][0])
    return conformance.EDITS[kind](case.model, conformance.check_level(case.model), inputs)


def test_the_judge_catches_a_diff_that_is_not_exactly_the_edit():
    from xc_core.review.model_diff import diff_models
    edit = _leaky_relu_edit("weight")
    diff = diff_models(conformance.onnx_side(edit.base, "a"), conformance.onnx_side(edit.new, "b"))
    assert conformance.judge(edit, diff) == []
    change = diff["changes"][0]
    tensor = change["detail"]["tensors"][0]
    spurious = {**change, "kind": "shapes", "detail": {"output 0": [[3], [4]]}}
    assert conformance.judge(edit, {**diff, "changes": diff["changes"] + [spurious]})      # one change too many
    assert conformance.judge(edit, {**diff, "changes": []})                                # the edit missing
    off = {**change, "detail": {"tensors": [{**tensor, "rel_l2": 0.2}]}}
    assert conformance.judge(edit, {**diff, "changes": [off]})                             # the wrong amount
    lower = {**change, "detail": {"tensors": [{**tensor, "rel_l2_bound": "lower"}]}}
    assert conformance.judge(edit, {**diff, "changes": [lower]})                           # not exact with values
    assert conformance.judge(edit, {**diff, "comparable": False, "line": "unrelated"})


def test_the_expected_changes_come_from_shape_inference_not_the_diff():
    # LeakyRelu's alpha changes no shape: the attribute alone; Flatten's axis changes its output shape: that too
    edit = _leaky_relu_edit("attribute")
    assert [c[0] for c in edit.expected] == ["attributes"]
    case = conformance.node_test_cases()["test_flatten_axis1"]
    edit = conformance.edit_attribute(case.model, conformance.check_level(case.model), None)
    assert sorted(c[0] for c in edit.expected) == ["attributes", "shapes"]
