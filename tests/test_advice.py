"""A failed target says whose limitation it is, the node or op, and what to do: from the messages the toolchains
really write (kept here verbatim, as seen on Hugging Face and third-party models), and end to end in the report and
the CLI."""
import onnx
import pytest
from onnx import TensorProto, helper

from xc_core.analysis.advice import LIMITS, TOOLCHAIN, XC, advice_line, advise

SEEN = [
    ("coreml-cpu", "compile failed: coremltools could not convert the model — ExportedProgram.run_decompositions({}): "
                   "Unsupported fx node diff, kind diff | ExportedProgram.run_decompositions() (default table): "
                   "Unsupported fx node alias, kind alias", TOOLCHAIN, "coremltools", None, "diff"),
    ("ort-cpu", "run failed: NOT_IMPLEMENTED : Could not find an implementation for IsNaN(20) node with name "
                "'node_isnan'", TOOLCHAIN, "ONNX Runtime", "node_isnan", "IsNaN"),
    ("ort-cpu-int8", "compile failed: ValueError: Expected mul to be an initializer", TOOLCHAIN, "quantize_dynamic",
     "mul", None),
    ("coreml-ane", "no PyTorch program from the ONNX: no PyTorch converter for STFT (domain ai.onnx, opset 17; first "
                   "at node 'stft') in onnx2torch or xc — export the model with the STFT as a convolution", XC,
     "xc's ONNX → PyTorch route", "stft", "STFT"),
    ("openvino-cpu[precision=f32]", "killed by SIGSEGV in run", TOOLCHAIN, "OpenVINO", None, None),
    ("inductor-cpu", "exceeded 300 s in compile", LIMITS, "time limit", None, None),
    ("ort-nnapi", "exceeded the 6 GiB memory limit in compile (resident 6.0 GiB)", LIMITS, "memory limit", None, None),
    ("ort-cpu", "no ONNX to compile: torch.onnx.export failed (DispatchError: No ONNX function found for "
                "aten.linalg_inv_ex.default)", TOOLCHAIN, "torch.onnx", None, "aten.linalg_inv_ex.default"),
]


@pytest.mark.parametrize("tid,error,owner,who,node,op", SEEN)
def test_known_failures_name_owner_node_op_and_a_workaround(tid, error, owner, who, node, op):
    a = advise(tid, error)
    assert a["owner"] == owner and who in a["who"] and a["workaround"]
    assert a["node"] == node and a["op"] == op
    line = advice_line(a)
    assert "\n" not in line and line.startswith("whose: ") and "what to do: " in line


def test_a_python_error_raised_in_xc_is_xcs_bug_not_the_compilers():
    tb = 'Traceback (most recent call last):\n  File "/srv/xc_core/targets/coreml.py", line 9, in _run\nKeyError: 1'
    assert advise("coreml-cpu", "run failed: KeyError: 1", tb)["owner"] == XC
    tb_lib = 'Traceback (most recent call last):\n  File "/venv/site-packages/coremltools/x.py", line 9\nKeyError: 1'
    assert advise("coreml-cpu", "run failed: KeyError: 1", tb_lib)["owner"] == TOOLCHAIN


@pytest.mark.slow
def test_the_report_and_the_cli_carry_the_advice(tmp_path, capsys):
    from xc_core.cli import main
    # ai.onnx.ml's Binarizer: ONNX Runtime runs it; neither onnx2torch nor xc has a converter for it
    nodes = [helper.make_node("Binarizer", ["x"], ["y"], name="binarize", domain="ai.onnx.ml", threshold=0.5)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 9
    onnx.save(m, str(tmp_path / "ml.onnx"))
    assert main(["analyze", str(tmp_path / "ml.onnx"), "--targets", "ort-cpu,coreml-cpu",
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    import json
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    t = report["targets"]["coreml-cpu"]
    assert t["status"] == "error" and t["advice"]["op"] == "Binarizer" and t["advice"]["owner"] == XC
    assert "↳ whose: xc's ONNX → PyTorch route (xc's limitation)" in out
    assert report["targets"]["ort-cpu"]["status"] == "ok" and "advice" not in report["targets"]["ort-cpu"]
