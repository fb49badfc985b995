"""Core AI targets: the Core AI program read back op by op and traced to the captured ops, run by Core AI's Linux
runtime (coreai-cpu: measured), the fp16 program with Neural Engine placement predicted by the cited rules
(coreai-ane), side by side with Core ML — and a model the converter refuses, which fails only its own columns."""
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("coreai_torch")

CORE_AI = ("coreai-cpu", "coreai-ane")
TARGETS = CORE_AI + ("coreml-ane", "coreml-cpu")


class AttentionTwoHeads(torch.nn.Module):
    """Embedding → LayerNorm → self-attention (SDPA) → Linear, and a second output (argmax over a softmax): layer
    norm and attention become Core AI composites; the token dim is dynamic."""

    def __init__(self):
        super().__init__()
        self.emb, self.ln = torch.nn.Embedding(50, 32), torch.nn.LayerNorm(32)
        self.qkv, self.out = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32)

    def forward(self, ids):
        h = self.ln(self.emb(ids))
        q, k, v = self.qkv(h).chunk(3, -1)
        b, t, _ = q.shape
        q, k, v = [x.view(b, t, 4, 8).transpose(1, 2) for x in (q, k, v)]
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        # A padding mask cast explicitly to float32, as Hugging Face models build theirs.
        y = self.out(a.transpose(1, 2).reshape(b, t, 32)) * (ids > 0).unsqueeze(-1).to(torch.float32)
        return y, torch.softmax(y, -1).argmax(-1)


class ConvBnLogcumsumexp(torch.nn.Module):
    """A convolution with batch norm (folded by Core AI's rewrite), then an op coreai-torch has no lowering for."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.logcumsumexp(torch.relu(self.bn(self.conv(x))).mean((2, 3)), 1)


@pytest.fixture(scope="module")
def attention_report(tmp_path_factory):
    from xc_core.api import analyze
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("coreai")
    path = folder / "attn.pt2"
    ids = torch.randint(0, 50, (2, 7))
    ep = torch.export.export(AttentionTwoHeads().eval(), (ids,),
                             dynamic_shapes={"ids": {1: torch.export.Dim("tokens", min=2, max=64)}})
    torch.export.save(ep, str(path))
    return analyze(str(path), list(TARGETS), out_dir=str(folder / "out")), str(folder / "out")


@pytest.mark.slow
def test_coreai_cpu_reads_the_program_back_traces_it_and_measures_it(attention_report):
    report, _ = attention_report
    t = report["targets"]["coreai-cpu"]
    assert t["status"] == "ok", t["error"]
    assert t["evidence"]["numerics"] == "measured"
    nodes = [n for n in t["graph"]["nodes"] if n["kind"] != "constant"]
    # One node per coreai op of @main, with the composites named after what they compute.
    assert {"layer_norm", "scaled_dot_product_attention", "gather_nd", "argmax"} <= {n["op_type"] for n in nodes}
    sdpa = next(n for n in nodes if n["op_type"] == "scaled_dot_product_attention")
    assert sdpa["attributes"]["coreai_op"] == "coreai.invoke" and "softmax" in sdpa["attributes"]["composite_ops"]
    assert sdpa["source_ops"] == ["scaled_dot_product_attention"]
    # How many ODIX ops (the runtime's executable form) each became; a reshape may become none.
    compute = [n for n in nodes if n["kind"] == "compute"]
    assert sum(n["attributes"]["odix_ops"] >= 1 for n in compute) >= 0.8 * len(compute)
    cov = report["alignment"]["coverage"]["coreai-cpu"]
    assert cov["ratio"] >= 0.9, cov["unmapped"]
    # Both outputs compared; fp32 end to end stays within 1e-5.
    assert t["drift"]["worst"]["rel_l2"] <= 1e-5
    assert len(t["drift"]["outputs"]) == 2
    steps = [s["name"] for s in t["stages"]["steps"]]
    assert any("as converted" in s for s in steps) and any("ODIX" in s for s in steps)
    assert any(a.endswith("model.aimodel.zip") for a in t["artifacts"])


@pytest.mark.slow
def test_layer_drift_comes_from_the_runtimes_intermediate_logger(tmp_path):
    from xc_core.api import analyze
    report = analyze("sample:transformer-mini", ["coreai-cpu"], out_dir=str(tmp_path / "out"))
    layers = report["targets"]["coreai-cpu"]["layer_drift"]
    assert len(layers["points"]) >= 3 and "IntermediateLogger" in layers["method"]
    assert max(p["rel_l2"] for p in layers["points"]) <= 1e-5


@pytest.mark.slow
def test_coreai_ane_is_fp16_with_cited_predicted_units(attention_report):
    report, _ = attention_report
    t = report["targets"]["coreai-ane"]
    assert t["status"] == "ok", t["error"]
    assert t["evidence"]["assignment"] == "predicted-rules" and t["evidence"]["numerics"] == "emulated"
    assert t["declared_precisions"] == ["fp16"]
    # Every float computation in fp16, the explicit float32 cast of the mask included.
    assert t["precision"]["mix"].get("fp16", 0) > 0 and not t["precision"]["mix"].get("fp32")
    nodes = {n["op_type"]: n for n in t["graph"]["nodes"] if n["kind"] == "compute"}
    assert nodes["gather_nd"]["backend"] == "cpu" and nodes["gather_nd"]["fallback"]
    assert "hollance" in nodes["gather_nd"]["attributes"]["unit_source"]
    assert nodes["scaled_dot_product_attention"]["backend"] == "ane"
    assert "macOS 27" in t["info"]["placement"]
    assert 1e-5 < t["drift"]["worst"]["rel_l2"] < 1e-1        # fp16 rounding, really computed


@pytest.mark.slow
def test_core_ml_and_core_ai_are_the_default_pair(attention_report):
    from xc_core.views.rows import default_pairs, pair_sentence
    report, _ = attention_report
    # Each pair in the report's target order (Core AI was asked for first here).
    assert [set(p) for p in default_pairs(report)[:2]] == [{"coreml-ane", "coreai-ane"}, {"coreml-cpu", "coreai-cpu"}]
    sentence = pair_sentence(report, "coreml-ane", "coreai-ane")
    assert "Neural Engine" in sentence and "Drift" in sentence


@pytest.mark.slow
def test_the_report_renders_with_core_ai(attention_report):
    from xc_core.review.markdown import report_markdown
    report, _ = attention_report
    md = report_markdown(report)
    assert "coreai-cpu" in md and "coreai-ane" in md


@pytest.mark.slow
def test_a_refused_op_fails_only_the_core_ai_columns_and_batch_norm_folds(tmp_path):
    from xc_core.api import analyze
    torch.manual_seed(0)
    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(ConvBnLogcumsumexp().eval(), (torch.randn(1, 3, 8, 8),)), str(path))
    report = analyze(str(path), ["coreai-cpu", "coreml-cpu"], out_dir=str(tmp_path / "out"))
    t = report["targets"]["coreai-cpu"]
    assert t["status"] == "error" and t["error_stage"] == "compile"
    assert "logcumsumexp" in t["error"]
    assert report["targets"]["coreml-cpu"]["status"] == "ok"
    # Without the refused op the same net converts, and the rewrite folds batch norm into the convolution.
    path2 = tmp_path / "net2.pt2"

    class ConvBn(ConvBnLogcumsumexp):
        def forward(self, x):
            return torch.relu(self.bn(self.conv(x))).mean((2, 3))
    torch.export.save(torch.export.export(ConvBn().eval(), (torch.randn(1, 3, 8, 8),)), str(path2))
    report = analyze(str(path2), ["coreai-cpu"], out_dir=str(tmp_path / "out2"))
    t = report["targets"]["coreai-cpu"]
    assert t["status"] == "ok", t["error"]
    assert t["info"]["coreai_ops_after_rewrite"] < t["info"]["coreai_ops_converted"]
    assert t["info"]["removed_by_rewrite"]["folded_source_ops"] == ["batch_norm"]
    folded = [n for n in t["graph"]["nodes"] if "batch_norm" in n["source_ops"]]
    assert len(folded) == 1 and "conv2d" in folded[0]["source_ops"] and len(folded[0]["fused_from"]) >= 2


def test_unimportable_core_ai_is_unavailable_with_the_reason(monkeypatch):
    import builtins

    from xc_core.targets.coreai import CoreAICpu
    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name.startswith("coreai"):
            raise ImportError("libcoreai.so: cannot open shared object file")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", refuse)
    ok, why = CoreAICpu.available()
    assert not ok and "libcoreai.so" in why and "coreai-core==1.0.0b3" in why


@pytest.mark.slow
def test_an_onnx_upload_reaches_core_ai_through_the_route(tmp_path):
    """Core AI converts PyTorch programs: an ONNX upload reaches it as the ONNX → PyTorch route's program, and its
    ops trace back to the ONNX nodes."""
    import onnx

    from xc_core.api import analyze
    path = tmp_path / "m.onnx"
    torch.onnx.export(torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),), str(path), dynamo=True)
    report = analyze(str(path), ["coreai-cpu"], out_dir=str(tmp_path / "out"))
    t = report["targets"]["coreai-cpu"]
    assert t["status"] == "ok", t["error"]
    assert t["info"]["onnx_conversion"] and report["capture"]["onnx_route"]["targets"] == ["coreai-cpu"]
    traced = {s for n in t["graph"]["nodes"] for s in n.get("source_ops") or []}
    assert traced and traced <= {n.name for n in onnx.load(str(path)).graph.node}
    assert os.path.isdir(tmp_path / "out")


@pytest.mark.slow
def test_the_fp16_program_converts_the_tensors_a_program_makes_in_its_code(tmp_path):
    """A tensor the model's code makes (torch.tensor in forward) is a lifted constant of the program, not a
    parameter or buffer: module.to(float16) leaves it float32, and the fp16 program must not mix the two."""
    from xc_core.api import analyze

    class Scales(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x) @ torch.tensor([[0.5, 1.0], [2.0, 0.0], [1.0, -1.0]])
    torch.manual_seed(0)
    ep = torch.export.export(Scales().eval(), (torch.randn(2, 4),))
    assert ep.constants and {t.dtype for t in ep.constants.values()} == {torch.float32}
    path = str(tmp_path / "scales.pt2")
    torch.export.save(ep, path)
    t = analyze(path, ["coreai-ane"])["targets"]["coreai-ane"]
    assert t["status"] == "ok", t["error"]
    assert t["drift"]["worst"]["rel_l2"] < 1e-2


class DeadChannel(torch.nn.Module):
    """A batch norm whose dead channel has statistics past float16's ±65,504 (PP-OCR's text detector has a
    running variance of 1e8): in float16 they are infinite, and inf − inf poisons everything after."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.bn, self.head = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), \
            torch.nn.Conv2d(4, 2, 1)
        self.bn.running_var[0], self.bn.running_mean[0] = 1e8, 3e5

    def forward(self, x):
        return torch.sigmoid(self.head(torch.relu(self.bn(self.conv(x)))))


@pytest.mark.slow
def test_an_op_whose_constant_overflows_float16_stays_fp32_as_in_core_ml(tmp_path):
    from xc_core.api import analyze
    ep = torch.export.export(DeadChannel().eval(), (torch.randn(1, 3, 8, 8),))
    path = str(tmp_path / "dead.pt2")
    torch.export.save(ep, path)
    report = analyze(path, ["coreai-ane", "coreai-cpu"])
    t = report["targets"]["coreai-ane"]
    assert t["status"] == "ok", t["error"]
    kept = [n for n in t["notes"] if "kept in fp32" in n]
    assert kept and kept[0].startswith("1 op(s) kept in fp32") and "batch_norm" in kept[0]
    assert t["precision"]["mix"].get("fp32") and t["precision"]["mix"].get("fp16")
    assert t["drift"]["worst"]["rel_l2"] < 1e-2
    assert report["targets"]["coreai-cpu"]["drift"]["worst"]["rel_l2"] < 1e-5     # the program left fp32
