""".pt2 archives load without running anything from the file: every crafted payload is refused with one line and
its canary file never appears; ordinary torch.export.save archives keep loading and compute what torch's own
loader computes."""

import pytest
import torch

from pt2_payloads import PAYLOAD_KINDS, craft, good_archive
from xc_core.errors import XcInputError
from xc_core.sources import load_source

# Seven of these run their payload inside torch.export.load / ExportedProgram.module() (checked when the loader was
# written); the other two are refused by torch only by luck of ordering, so they are pinned here too.
REFUSAL = {
    "sample-inputs": "sample inputs .* hold Python objects other than tensors",
    "use-pickle": "weight 'c.weight' is stored as a pickle",
    "expr-str": "symbolic size is not plain arithmetic",
    "opaque-const": "stored as an opaque Python object",
    "custom-obj": "stored as a TorchScript custom object",
    "guards-code": "input guard is not plain shape arithmetic",
    "op-target": "calls 'torch.os.system', which is not a torch.ops operator name",
    "fqn-injection": "parameter name is .* not a plain dotted name",
    "legacy-format": "legacy format",
}


@pytest.mark.parametrize("kind", PAYLOAD_KINDS)
def test_crafted_archive_is_refused_and_its_payload_never_runs(tmp_path, kind):
    canary = tmp_path / "canary"
    path = craft(kind, str(tmp_path / f"{kind}.pt2"), str(canary))
    with pytest.raises(XcInputError, match=REFUSAL[kind]) as e:
        src = load_source(path)
        src.module(torch.randn(2, 3, 8, 8))  # were it loaded, running it would fire guards and targets
    assert "\n" not in str(e.value) and str(e.value).startswith(f"{kind}.pt2: ")
    assert not canary.exists(), f"the {kind} payload ran"


def test_payload_refused_through_the_cli_with_exit_2(tmp_path):
    from xc_core.cli import main
    canary = tmp_path / "canary"
    path = craft("guards-code", str(tmp_path / "evil.pt2"), str(canary))
    assert main(["analyze", path, "--targets", "ort-cpu", "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert not canary.exists()


class _Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


class _SharedAndConstants(torch.nn.Module):
    """Tied weights, a non-persistent buffer, a lifted tensor constant, an empty parameter, three outputs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(4, 4)
        self.b = self.a
        self.register_buffer("nb", torch.ones(4), persistent=False)
        self.k = torch.tensor([1.0, 2.0, 3.0, 4.0])
        self.e = torch.nn.Parameter(torch.zeros(0, 4))

    def forward(self, x, ids):
        return self.b(x) + self.nb + self.k, ids * 2, self.e.sum() + x.mean()


class _LstmBf16Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lstm = torch.nn.LSTM(4, 8, batch_first=True)
        self.head = torch.nn.Linear(8, 2).to(torch.bfloat16)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y.to(torch.bfloat16)).float()


class _DynamicHW(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)

    def forward(self, x):
        return torch.nn.functional.interpolate(self.c(x), scale_factor=2.0)[..., : x.shape[2] // 2]


class _OddModuleNames(torch.nn.Module):
    """ModuleDict keys need not be identifiers; FX quotes them, so they must keep loading."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleDict({"conv-1": torch.nn.Conv2d(3, 4, 1), "0 act": torch.nn.ReLU()})

    def forward(self, x):
        return self.blocks["0 act"](self.blocks["conv-1"](x))


class _CausalMask(torch.nn.Module):
    """transformers' causal mask: `&` and `|` on bool tensors export as the dunder operators aten.__and__/__or__."""

    def forward(self, x):
        n = x.shape[-1]
        i = torch.arange(n)
        mask = (i[:, None] >= i[None, :]) & (x[0] > -10) | (i[:, None] == i[None, :])
        return x.masked_fill(~mask, float("-inf")).softmax(-1)


ORDINARY = {
    "causal-mask-dunder-ops": lambda tmp: _save(_CausalMask(), (torch.randn(1, 6, 6),), tmp),
    "odd-module-names": lambda tmp: _save(_OddModuleNames(), (torch.randn(1, 3, 4, 4),), tmp),
    "dynamic-batch": lambda tmp: good_archive(tmp),
    "cond": lambda tmp: _save(_Cond(), (torch.randn(3, 4),), tmp),
    "tied-constants-3-outputs": lambda tmp: _save(_SharedAndConstants(),
                                                  (torch.randn(2, 4), torch.randint(0, 5, (3,))), tmp),
    "lstm-bf16": lambda tmp: _save(_LstmBf16Head(), (torch.randn(1, 10, 4),), tmp),
    "dynamic-hw-guards": lambda tmp: _save(
        _DynamicHW(), (torch.randn(2, 3, 64, 64),), tmp,
        {"x": {0: torch.export.Dim("b", max=8), 2: torch.export.Dim.AUTO, 3: torch.export.Dim.AUTO}}),
}


def _save(model, args, path, dynamic_shapes=None):
    torch.export.save(torch.export.export(model.eval(), args, dynamic_shapes=dynamic_shapes), path)
    return path


@pytest.mark.parametrize("case", list(ORDINARY))
def test_ordinary_archives_load_and_compute_what_torch_computes(tmp_path, case):
    path = ORDINARY[case](str(tmp_path / f"{case}.pt2"))
    ep_torch = torch.export.load(path)   # our own file: torch's loader is fine here, as the comparison
    src = load_source(path)
    assert src.kind == "exported-program"
    args = tuple(ep_torch.example_inputs[0])
    want = torch.utils._pytree.tree_leaves(ep_torch.module()(*args))
    got = torch.utils._pytree.tree_leaves(src.module(*args))
    assert len(want) == len(got) and all(torch.equal(a, b) for a, b in zip(want, got))
    assert [n.name for n in src.exported_program.graph.nodes] == [n.name for n in ep_torch.graph.nodes]


def test_aoti_code_in_an_archive_is_never_loaded(tmp_path):
    import zipfile
    path = good_archive(str(tmp_path / "m.pt2"))
    with zipfile.ZipFile(path, "a") as z:
        root = z.namelist()[0].split("/")[0]
        z.writestr(f"{root}/data/aotinductor/model/model.so", b"\x7fELF not a library")
    src = load_source(path)
    assert any("never loads it" in n and "aotinductor" in n for n in src.notes)


@pytest.mark.parametrize("target,why", [
    ("torch.ops.aten.__class__", "names something in torch.ops that is not an operator, so it is not allowed"),
    ("torch.ops.aten.add.__init__", "not allowed"),
    ("torch.ops.aten.no_such_op.default", "not a registered operator in this torch"),
    ("torch.ops.__builtins__.open.default", "not a torch.ops operator name"),
    ("torch.ops.aten.add.Tensor.extra.parts", "not a torch.ops operator name"),
])
def test_call_targets_are_resolved_in_torch_ops_not_guessed_by_pattern(tmp_path, target, why):
    import json
    import pt2_payloads as P
    good = P.good_archive(str(tmp_path / "g.pt2"))
    m = P._read(good)
    root = P._root(m)
    model_json = json.loads(m[root + "models/model.json"])
    node = next(n for n in model_json["graph_module"]["graph"]["nodes"] if "relu" in n["target"])
    node["target"] = target
    m[root + "models/model.json"] = json.dumps(model_json).encode()
    P._write(str(tmp_path / "edited.pt2"), m)
    with pytest.raises(XcInputError, match=why) as e:
        load_source(str(tmp_path / "edited.pt2"))
    assert "\n" not in str(e.value)
