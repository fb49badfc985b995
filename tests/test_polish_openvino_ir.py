"""openvino-cpu keeps two models, as the Downloads page labels them: the CPU plugin's execution graph
(runtime_model.xml, for Netron; read_model refuses it) and the model it compiled as an IR that read_model loads
and that computes what the captured ONNX computes."""
import os

import numpy as np
import pytest

ov = pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from xc_core.api import analyze
    out = tmp_path_factory.mktemp("ov-ir")
    report = analyze("sample:vision-mini", ["openvino-cpu"], out_dir=str(out))
    assert report["targets"]["openvino-cpu"]["status"] == "ok", report["targets"]["openvino-cpu"]["error"]
    return report, str(out)


def test_the_ir_loads_with_read_model_and_computes_the_captured_model(run):
    import onnxruntime as ort
    report, out = run
    artifacts = report["targets"]["openvino-cpu"]["artifacts"]
    assert {"artifacts/openvino-cpu/model.xml", "artifacts/openvino-cpu/model.bin"} <= set(artifacts)
    core = ov.Core()
    model = core.read_model(os.path.join(out, "artifacts/openvino-cpu/model.xml"))
    with np.load(os.path.join(out, "inputs.npz"), allow_pickle=False) as z:
        feeds = {k: z[k] for k in z.files}
    # fp32 on every CPU: the plugin would pick bf16 by itself on AMX / avx512_bf16 hosts.
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = compiled({p: feeds[next(n for n in p.get_names() if n in feeds)] for p in compiled.inputs})
    onnx = os.path.join(out, "artifacts/capture/model.onnx")
    expected = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(compiled.outputs) == len(expected)
    for port, want in zip(compiled.outputs, expected):
        np.testing.assert_allclose(got[port], want, rtol=1e-4, atol=1e-5)   # weights kept fp32, not compressed


def test_the_execution_graph_is_for_netron_not_for_read_model(run):
    _, out = run
    runtime = os.path.join(out, "artifacts/openvino-cpu/runtime_model.xml")
    assert os.path.getsize(runtime) > 0
    with pytest.raises(RuntimeError):
        ov.Core().read_model(runtime)
