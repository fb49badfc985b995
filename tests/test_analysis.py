"""Analyses: drift metrics (as Polygraphy reports them), fusion pattern names, op counts."""
import math

import numpy as np

from xc_core.analysis.drift import drift_metrics, passes, worst
from xc_core.analysis.fusion import fusion_groups, pattern_counts
from xc_core.analysis.op_counts import op_counts
from xc_core.ir import CONSTANT, Graph, Node


def test_drift_metrics_on_known_arrays():
    ref = np.array([1.0, -2.0, 4.0, 0.5], dtype=np.float32)
    out = np.array([1.1, -2.0, 3.9, 0.5], dtype=np.float32)
    m = drift_metrics(ref, out)
    assert math.isclose(m["max_abs"], 0.1, rel_tol=1e-5)
    assert math.isclose(m["mean_abs"], 0.05, rel_tol=1e-5)
    assert math.isclose(m["rel_l2"], math.sqrt(0.02) / math.sqrt(1 + 4 + 16 + 0.25), rel_tol=1e-5)
    assert math.isclose(m["snr_db"], 20 * math.log10(1 / m["rel_l2"]), rel_tol=1e-6)
    assert m["cosine"] < 1.0 and m["cosine"] > 0.99
    assert math.isclose(m["min_atol"], 0.1, rel_tol=1e-5)
    assert math.isclose(m["min_rtol"], 0.1, rel_tol=1e-5)   # |1.1-1|/1
    assert passes(m, atol=0.1001, rtol=0, reference=ref, target=out)
    assert not passes(m, atol=0.05, rtol=0, reference=ref, target=out)
    assert passes(m, atol=0, rtol=0.1001, reference=ref, target=out)


def test_drift_identical_zero_reference_and_shape_mismatch():
    z = np.zeros(4, np.float32)
    same = drift_metrics(z, z)
    assert same["exact"] and same["snr_db"] is None and same["cosine"] == 1.0 and same["min_rtol"] == 0.0
    off = drift_metrics(z, z + 1e-3)
    assert off["min_rtol"] is None and off["rtol_needs_atol"]
    bad = drift_metrics(np.zeros((2, 3)), np.zeros((3, 2)))
    assert bad["error"].startswith("shape mismatch")
    assert worst({"a": bad, "b": same})["output"] == "a"


def _node(i, op, fused=(), kind="compute"):
    return Node(id=i, op_type=op, kind=kind, fused_from=list(fused), source_ops=list(fused))


def test_fusion_groups_and_patterns():
    src = Graph("s", "onnx", [_node("c", "Conv"), _node("b", "BatchNormalization"), _node("r", "Relu"),
                              _node("k", "Constant", kind=CONSTANT), _node("g", "Gemm")])
    out = Graph("o", "optimized", [_node("f", "FusedConv", ["c", "b", "r", "k"]), _node("g2", "Gemm", ["g"])])
    groups = fusion_groups(out, src)
    assert len(groups) == 1 and groups[0]["pattern"] == "Conv+BatchNormalization+Relu → FusedConv"
    assert pattern_counts(groups) == [{"pattern": "Conv+BatchNormalization+Relu → FusedConv", "count": 1}]
    assert op_counts(out) == {"FusedConv": 1, "Gemm": 1}
