"""A Hugging Face decoder, as users export it, is analysed — not refused: its `.pt2` calls dunder aten operators
(the causal mask's `&`) and returns a ModelOutput the server's torch does not know; its ONNX from the dynamo
exporter is opset 20 with Split-18. The other families (ViT, wav2vec2) run in bench/hf_models.py."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf")
    subprocess.run([sys.executable, os.path.join(HERE, "hf_models.py"), str(out), "gpt2"], check=True,
                   capture_output=True, timeout=600)
    return {"pt2": str(out / "gpt2.pt2"), "onnx": str(out / "gpt2.onnx")}


_LOAD_WITHOUT_TRANSFORMERS = """
import json, sys
sys.modules["transformers"] = None      # as on a server without it: its ModelOutput types are not registered
from xc_core.sources import load_source
src = load_source(sys.argv[1])
ids = src.inputs[0]
print(json.dumps({"notes": src.notes, "ids": [ids.name, ids.low, ids.high]}))
"""


@pytest.mark.slow
def test_the_decoder_pt2_loads_with_its_own_names_and_token_range(gpt2):
    # In a process of its own: another test of this session may have imported transformers, which registers its
    # output types with torch; a server that never imports it must read them all the same.
    root = os.path.dirname(HERE)
    out = subprocess.run([sys.executable, "-c", _LOAD_WITHOUT_TRANSFORMERS, gpt2["pt2"]], cwd=root,
                         env={**os.environ, "PYTHONPATH": root}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert any("CausalLMOutput" in n and "read as dicts" in n for n in loaded["notes"]), loaded["notes"]
    assert loaded["ids"] == ["input_ids", 0, 500]     # the vocabulary, through a view


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["pt2", "onnx"])
def test_the_decoder_compiles_for_ort_core_ml_and_litert(gpt2, fmt, tmp_path):
    from xc_core.cli import main
    out = tmp_path / "out"
    assert main(["analyze", gpt2[fmt], "--targets", "ort-cpu,coreml-cpu,litert-xnnpack", "--out", str(out),
                 "--quiet"]) == 0
    report = json.loads((out / "report.json").read_text())
    for tid, t in report["targets"].items():
        assert t["status"] == "ok", (tid, t["error"], t.get("advice"))
    drift = report["targets"]["coreml-cpu"]["drift"]
    # the .pt2's output is the ModelOutput's field; the ONNX's is what its graph calls it
    import onnx
    graph_outputs = [o.name for o in onnx.load(gpt2["onnx"], load_external_data=False).graph.output]
    assert list(drift["outputs"]) == (["logits"] if fmt == "pt2" else graph_outputs)
    assert drift["worst"]["rel_l2"] < 1e-4
    # litert-torch caches constants by memory address: without xc's guard, the second block got the first block's
    # attention weight on most conversions (rel L2 0.2–0.5)
    assert report["targets"]["litert-xnnpack"]["drift"]["worst"]["rel_l2"] < 1e-4
