"""The report calls a model's outputs and modules what the model calls them: a dict's keys (a Hugging Face
ModelOutput's fields) or 'output <i>', never an internal node ('linear_12'); and the same module paths whether the
model came as a .pt2 or as ONNX from torch's exporter."""
import numpy as np
import torch

from xc_core.api import analyze
from xc_core.readers.exported_program import _module_path_from_scopes
from xc_core.capture import capture
from xc_core.sources import load_source


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.fc = torch.nn.LayerNorm(8), torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(self.ln(x))


class _Wrapped(torch.nn.Module):
    """model.vit.layers.N.{ln,fc}, returning a dict as Hugging Face models do."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.model = torch.nn.Module()
        self.model.vit = torch.nn.Module()
        self.model.vit.layers = torch.nn.ModuleList([_Block(), _Block()])
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        for layer in self.model.vit.layers:
            x = layer(x)
        return {"logits": self.head(x), "hidden": [x, x.relu()]}


class _Pair(torch.nn.Module):
    def forward(self, x):
        return x.sin(), x.cos()


def _save_pt2(model, args, path) -> str:
    torch.export.save(torch.export.export(model.eval(), args), path)
    return path


def test_dict_outputs_are_named_by_their_keys_tuples_by_position(tmp_path):
    args = (torch.randn(2, 8),)
    report = analyze(_save_pt2(_Wrapped(), args, str(tmp_path / "w.pt2")), ["ort-cpu", "inductor-cpu"],
                     out_dir=str(tmp_path / "w"))
    for tid in ("ort-cpu", "inductor-cpu"):
        assert list(report["targets"][tid]["drift"]["outputs"]) == ["logits", "hidden[0]", "hidden[1]"], tid
    assert list(report["reference"]["outputs"]) == ["logits", "hidden[0]", "hidden[1]"]
    report = analyze(_save_pt2(_Pair(), args, str(tmp_path / "p.pt2")), ["ort-cpu"], out_dir=str(tmp_path / "p"))
    assert list(report["targets"]["ort-cpu"]["drift"]["outputs"]) == ["output 0", "output 1"]


def test_module_paths_read_the_same_from_pt2_and_from_torch_onnx(tmp_path):
    model, args = _Wrapped().eval(), (torch.randn(2, 8),)
    pt2 = _save_pt2(model, args, str(tmp_path / "m.pt2"))
    onnx_path = str(tmp_path / "m.onnx")
    torch.onnx.export(model, args, onnx_path, dynamo=True)
    paths = []
    for f in (pt2, onnx_path):
        src = load_source(f)
        feeds = {s.name: np.zeros(s.shape, np.float32) for s in src.inputs}
        cap = capture(src, str(tmp_path / f"cap-{len(paths)}"), feeds)
        paths.append({n.module_path for n in cap.before.nodes if n.module_path})
    assert paths[0] == paths[1]
    assert "model.vit.layers.0.ln" in paths[1] and not any("model.model" in p for p in paths[1])


def test_scope_metadata_in_either_spelling():
    """torch 2.13 writes full paths per scope; older exporters wrote each module's own name."""
    assert _module_path_from_scopes("['', 'm', 'm.vit', 'm.vit.layers.0', 'm.vit.layers.0.ln', 'layer_norm']") \
        == "m.vit.layers.0.ln"
    assert _module_path_from_scopes("['', 'm', 'vit', 'layers.0', 'ln', 'layer_norm']") == "m.vit.layers.0.ln"
    for bad in ("1", "[1, 2]", "[" * 500, "x" * 20_000, "__import__('os')"):
        assert _module_path_from_scopes(bad) is None
