"""Programs exported the way Hugging Face users export them — `kwargs={"use_cache": False}`, tensors by keyword,
`return_dict=False` — are re-specialised once by the loader (constants baked in, tensors positional), so the
reference and every target get a program of tensor inputs only, and the report says which constants were baked in.

The transformers models are built from configs with random weights, in their own process (tests/
hf_constant_exports.py): importing transformers here would register its output types with torch and hide what a
server without it sees."""
import os
import subprocess
import sys

import pytest
import torch

from xc_core.api import analyze
from xc_core.errors import XcInputError
from xc_core.sources import load_source
from xc_core.sources.pt2_constants import baked_in_note

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf-kwargs")
    done = subprocess.run([sys.executable, os.path.join(HERE, "hf_constant_exports.py"), str(out)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(line.split(" ", 1) for line in done.stdout.splitlines())


def _save(ep, path) -> str:
    torch.export.save(ep, str(path))
    return str(path)


def _ok_and_compared(report, targets):
    """The reference ran, every target ran, and its outputs were compared with the reference's and agree (these
    targets all run fp32)."""
    assert report["reference"]["status"] == "ok", report["reference"].get("error")
    for t in targets:
        block = report["targets"][t]
        assert block["status"] == "ok", (t, block.get("error"))
        outputs = block["drift"]["outputs"]
        assert outputs and all(o["finite"] and o["rel_l2"] < 1e-4 for o in outputs.values()), (t, outputs)


# --- the Hugging Face patterns, through xc's real pipeline --------------------------------------------------------

@pytest.mark.slow
def test_a_qwen2_decoder_exported_with_use_cache_false_runs_everywhere(hf):
    """The issue's model: the reference failed and 9 targets with it (Core ML: "Placeholder val must be a tensor"),
    each in its own words. In worker processes, as the CLI and the dashboard run it: the reference's worker loads
    the source again and gets the same re-specialised program."""
    targets = ["ort-cpu", "coreml-cpu"]
    report = analyze(hf["qwen2_use_cache"], targets)
    _ok_and_compared(report, targets)
    src = report["source"]
    assert src["constant_inputs"] == {"use_cache": False}
    assert [i["name"] for i in src["inputs"]] == ["input_ids"]
    assert "use_cache=False was recorded as a constant; the program was re-exported with it baked in" in src["notes"]
    # the output keeps the model's own name
    assert list(report["targets"]["ort-cpu"]["drift"]["outputs"]) == ["logits"]


@pytest.mark.slow
def test_a_bert_encoder_with_keyword_masks_and_return_dict_false(hf):
    """Tensors by keyword (attention_mask, token_type_ids) become positional inputs under their own names; the
    mask is drawn as a 0/1 mask; return_dict=False is baked in and the tuple's two outputs are compared."""
    targets = ["ort-cpu", "coreml-cpu"]
    report = analyze(hf["bert_return_tuple"], targets, isolate=False)
    _ok_and_compared(report, targets)
    src = report["source"]
    assert src["constant_inputs"] == {"return_dict": False}
    inputs = {i["name"]: i for i in src["inputs"]}
    assert list(inputs) == ["input_ids", "attention_mask", "token_type_ids"]
    assert (inputs["attention_mask"]["low"], inputs["attention_mask"]["high"]) == (0, 2)
    assert len(report["targets"]["ort-cpu"]["drift"]["outputs"]) == 2


@pytest.mark.slow
def test_keyword_tensors_without_constants_are_made_positional(hf):
    """No constant at all, only tensors by keyword: still one program of positional tensors, and no
    constant_inputs field (reports stay as they were for programs that need nothing)."""
    from xc_core.limits import Limits
    from xc_core.sources.pt2_archive import load_pt2
    src = load_source(hf["bert_keywords"])
    assert [i.name for i in src.inputs] == ["input_ids", "attention_mask"]
    assert "constant_inputs" not in src.to_dict()
    assert any("re-exported to take them positionally" in n for n in src.notes)
    ids = torch.randint(0, 512, (1, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    original, _ = load_pt2(hf["bert_keywords"], Limits.from_env())
    with torch.no_grad():
        got = src.module(ids, mask)
        want = original.module()(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(got["last_hidden_state"], want["last_hidden_state"])


# --- the re-specialisation itself, on small modules -----------------------------------------------------------------

class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, scale, mode="add", extra=None, y=None):
        out = self.proj(x) * scale
        return out + y if mode == "add" and y is not None else out


def test_every_constant_kind_is_baked_in_and_dynamic_dims_stay_dynamic(tmp_path):
    """A positional float, a str and a None keyword, a tensor by keyword, a dynamic batch shared by x and y."""
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    batch = torch.export.Dim("batch", min=2, max=16)
    ep = torch.export.export(Scaled().eval(), (x, 0.5), kwargs={"mode": "add", "extra": None, "y": y},
                             dynamic_shapes={"x": {0: batch}, "scale": None, "mode": None, "extra": None,
                                             "y": {0: batch}})
    src = load_source(_save(ep, tmp_path / "scaled.pt2"))
    assert src.constant_inputs == {"scale": 0.5, "mode": "add", "extra": None}
    assert [i.name for i in src.inputs] == ["x", "y"]
    # one symbol for both inputs' batch, with the range the export recorded
    (sym,) = {i.dim_names[0] for i in src.inputs}
    assert sym and src.dim_bounds[sym] == (2, 16)
    big_x, big_y = torch.randn(7, 4), torch.randn(7, 4)
    with torch.no_grad():
        torch.testing.assert_close(src.module(big_x, big_y), ep.module()(big_x, 0.5, mode="add", extra=None,
                                                                          y=big_y))
    # the ops keep where they came from: the Linear's module path survives the re-export
    linear = next(n for n in src.exported_program.graph.nodes if n.target is torch.ops.aten.linear.default)
    assert any(path == "proj" for path, _ in linear.meta["nn_module_stack"].values())
    assert [s.target for s in src.exported_program.graph_signature.input_specs if s.target] == \
        ["proj.weight", "proj.bias"]
    assert baked_in_note(src.constant_inputs) == ("scale=0.5, mode='add', extra=None were recorded as constants; "
                                                  "the program was re-exported with them baked in")


def test_a_tensors_only_program_is_left_as_it_is(tmp_path):
    ep = torch.export.export(Scaled().eval(), (torch.randn(2, 4), torch.tensor(2.0)))
    src = load_source(_save(ep, tmp_path / "plain.pt2"))
    assert src.constant_inputs == {} and src.notes == []
    assert [i.name for i in src.inputs] == ["x", "scale"]


def test_a_failed_re_export_is_one_line_owned_by_the_source(tmp_path, monkeypatch):
    ep = torch.export.export(Scaled().eval(), (torch.randn(2, 4), 0.5))
    path = _save(ep, tmp_path / "scaled.pt2")

    def refuse(*args, **kwargs):
        raise RuntimeError("Dynamo could not trace\nmore detail")
    monkeypatch.setattr(torch.export, "export", refuse)
    with pytest.raises(XcInputError) as e:
        load_source(path)
    text = str(e.value)
    assert "\n" not in text and text.startswith("scaled.pt2: the program records scale=0.5 in its signature")
    assert "RuntimeError: Dynamo could not trace" in text and "positional tensor inputs" in text


# --- shown to the user --------------------------------------------------------------------------------------------

def test_the_cli_and_markdown_say_the_constants_were_baked_in():
    from xc_core.cli import inputs_table
    from xc_core.sources.facts import source_fact_lines
    report = {"source": {"constant_inputs": {"use_cache": False}, "inputs": []}}
    line = "use_cache=False was recorded as a constant; the program was re-exported with it baked in"
    assert source_fact_lines(report) == [line]
    assert source_fact_lines({"source": {}}) == []            # an older report: no field, no line
    full = {"source": {"constant_inputs": {"use_cache": False}, "inputs": [], "kind": "exported-program"},
            "inputs": {"origin": "seeded-random"}, "reference": {"status": "ok"}}
    assert line in inputs_table(full)


def test_the_inputs_panel_shows_the_recorded_constants_read_only():
    from streamlit.testing.v1 import AppTest

    def panel():
        import streamlit as st

        from pages import _inputs_panel
        report = {"source": {"inputs": [{"name": "input_ids", "shape": [1, 8], "dtype": "int64", "low": 0,
                                         "high": 512, "note": "", "value": None, "dim_names": []}],
                             "constant_inputs": {"use_cache": False, "attn_implementation": "sdpa"}},
                  "reference": {"status": "ok"}}
        _inputs_panel.remember_auto("k", report)
        _inputs_panel.render(st.sidebar, "k", report, [])

    at = AppTest.from_function(panel, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    shown = " ".join(m.value for m in at.sidebar.markdown) + " " + " ".join(c.value for c in at.sidebar.caption)
    assert "use\\_cache" in shown and "False" in shown and "attn\\_implementation" in shown
    assert "with them baked in" in shown
    # read-only: no widget for a constant
    keys = [w.key for w in list(at.sidebar.number_input) + list(at.sidebar.checkbox) + list(at.sidebar.text_input)]
    assert not any("use_cache" in str(k) for k in keys)
