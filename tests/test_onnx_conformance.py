"""xc's ONNX → PyTorch route against ONNX's own node tests (onnx.backend.test.case.node, in the onnx wheel), a fast
slice of bench/onnx_conformance.py: one case for every op type the route converts, each giving the spec's outputs or
a clean one-line refusal — never a silent mismatch, never a bare exception. And onnx2torch's converters read
against the ONNX spec (xc_core.onnx_route.conformance.onnx2torch_audit): every attribute default that disagrees and
every attribute a converter ignores is one xc has accounted for."""
import re

import pytest

from xc_core.onnx_route.conformance import (MATCH, MISMATCHED, OUTSIDE, REFUSED, _arrays, node_cases,
                                            onnx2torch_audit, run_case)


def _converted_op_types() -> set[str]:
    """The default-domain and ai.onnx.ml op types the route has a converter for (onnx2torch's and xc's)."""
    from xc_core.onnx_route.converters import import_onnx2torch
    import_onnx2torch()
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY
    return {d.operation_type for d in _CONVERTER_REGISTRY if d.domain in ("", "ai.onnx.ml")}


def _slice() -> dict[str, str]:
    """{op type: a node test of that op alone}: the case with the shortest name among those whose inputs xc takes
    (no sequence, string or float8 input), for each op type the route converts and ONNX has a test for."""
    chosen = {}
    cases = node_cases()
    for name in sorted(cases, key=lambda n: (len(n), n)):
        model = cases[name].model
        ops = {n.op_type for n in model.graph.node}
        if len(ops) != 1 or "expanded" in name:
            continue
        op = next(iter(ops))
        if op in chosen or op not in _converted_op_types():
            continue
        if run_case_is_inside(cases[name]):
            chosen[op] = name
    return chosen


def run_case_is_inside(case) -> bool:
    """Whether xc takes the case's inputs at all (tensors of the types it accepts, tensor outputs)."""
    from xc_core.errors import XcInputError
    from xc_core.sources.onnx_file import onnx_input_specs
    inputs, expected = (_arrays(values) for values in case.data_sets[0])
    if any(getattr(v, "dtype", object) == object for v in list(inputs) + list(expected)):
        return False
    try:
        onnx_input_specs(case.model)
    except XcInputError:
        return False
    return True


SLICE = _slice()
# The cases whose conversion the issue or the full run found wrong: in the slice too, and they must match.
KNOWN = ["test_cumsum_1d", "test_isinf_positive", "test_isinf_negative", "test_nonzero_example",
         "test_resize_downsample_scales_nearest", "test_resize_downsample_sizes_nearest", "test_basic_conv_with_padding",
         "test_layer_normalization_4d_axis0", "test_layer_normalization_2d_axis0", "test_top_k_same_values",
         "test_pow_types_int64_float32", "test_flatten_axis0", "test_gather_elements_negative_indices",
         "test_convtranspose_output_shape", "test_selu", "test_shape_start_greater_than_end", "test_scatternd_max",
         "test_cumsum_2d_int32", "test_range_int32_type_negative_delta", "test_quantizelinear_int16"]


def test_the_slice_covers_every_converted_op_type_onnx_tests():
    tested = {n.op_type for case in node_cases().values() for n in case.model.graph.node}
    untested = _converted_op_types() & tested - set(SLICE)
    # an op type with node tests whose single-op cases all take sequences or strings: none today
    assert not untested, untested
    assert len(SLICE) > 100


@pytest.mark.parametrize("name", sorted(set(SLICE.values()) | set(KNOWN)))
def test_a_node_test_gives_the_spec_outputs_or_a_clean_refusal(name):
    outcome = run_case(node_cases()[name])
    assert outcome.status in (MATCH, REFUSED, OUTSIDE), (outcome.status, outcome.reason)
    if outcome.status == REFUSED:
        assert "\n" not in outcome.reason and outcome.op and re.search(r"\b" + outcome.op + r"\b", outcome.reason)
        assert not re.match(r"(KeyError|IndexError|TypeError|ValueError|AttributeError)\b", outcome.reason)
    if name in KNOWN:
        assert outcome.status == MATCH, outcome.reason


def test_a_wrong_program_is_a_mismatch_not_a_match(monkeypatch):
    """The harness can fail: onnx2torch's own CumSum default (reverse read as 1) brought back."""
    from xc_core.onnx_route import graph_prep
    monkeypatch.setattr(graph_prep, "spell_out_defaults", lambda m: [])
    outcome = run_case(node_cases()["test_cumsum_1d"])
    assert outcome.status == MISMATCHED and "outside rtol" in outcome.reason


def test_onnx2torch_read_against_the_spec_is_accounted_for():
    """Every onnx2torch attribute default that disagrees with the spec is in ONNX2TORCH_DEFAULTS (graph_prep writes
    every default out, and notes the ones that would have mattered); every attribute a kept converter ignores is
    refused when set (IGNORED_ATTRIBUTES) or changes no value. The audit reads the converters' source, so an
    onnx2torch upgrade that changes them fails here until xc accounts for it."""
    from xc_core.onnx_route.converters import (HARMLESS_ATTRIBUTES, IGNORED_ATTRIBUTES, ONNX2TORCH_DEFAULTS,
                                               REPLACED)
    audit = onnx2torch_audit()
    checked = sum(len(v["defaults"]) for v in audit.values())
    assert checked > 100                      # the audit reads real converters
    wrong = {(op, row["attribute"]): row["onnx2torch"] for (_, op, _), v in audit.items() for row in v["defaults"]
             if not row["agrees"]}
    assert wrong == ONNX2TORCH_DEFAULTS
    assert wrong[("CumSum", "reverse")] == 1  # the bug, found by reading the source
    ignored = {(op, a) for (_, op, _), v in audit.items() for a in v["ignored"] if op not in REPLACED}
    unaccounted = {(op, a) for op, a in ignored if a not in HARMLESS_ATTRIBUTES and a not in
                   IGNORED_ATTRIBUTES.get(op, set())}
    assert not unaccounted, unaccounted
    assert ("BatchNormalization", "training_mode") in ignored     # found by reading the source, and refused


def test_an_ignored_attribute_set_is_refused_in_one_line(tmp_path):
    """BatchNormalization in training mode: onnx2torch's converter never reads training_mode."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from xc_core.onnx_route.conformance import compare  # noqa: F401 — the module under test is importable
    from test_onnx_route import _model, _route, _x
    inits = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("s", "b", "mean", "var")]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"], name="bn",
                              training_mode=1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits, opset=15)
    error = _route(tmp_path, model, {"x": _x(2, 3, 4)})["error"]
    assert error.startswith("BatchNormalization 'bn' (domain ai.onnx): training_mode=1, which onnx2torch's "
                            "converter does not read"), error
