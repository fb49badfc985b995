"""Task accuracy on a dataset (xc_core/analysis/accuracy.py): the math against scikit-learn's, and a tiny classifier
whose near-tie samples a lower-precision target is known to flip, end to end through api.analyze, the CLI's line,
the Markdown and HTML reports and the Overview / Drift pages."""
import os

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, confusion_matrix, top_k_accuracy_score

from xc_core.analysis.accuracy import classify, per_sample

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_classification_figures_match_scikit_learn():
    rng = np.random.default_rng(1)
    n, c = 200, 6
    reference = rng.normal(size=(n, c))
    target = reference + rng.normal(scale=0.6, size=(n, c))
    labels = rng.integers(0, c, n)
    out = classify(target, reference, labels, 3, [f"s{i}" for i in range(n)], [])
    ref_top1, tgt_top1 = reference.argmax(1), target.argmax(1)
    assert out["accuracy"] == pytest.approx(accuracy_score(labels, tgt_top1))
    assert out["reference_accuracy"] == pytest.approx(accuracy_score(labels, ref_top1))
    assert out["top1_agreement"] == pytest.approx(accuracy_score(ref_top1, tgt_top1))
    assert out["topk_agreement"] == pytest.approx(top_k_accuracy_score(ref_top1, target, k=3, labels=range(c)))
    assert out["changed_count"] == int((ref_top1 != tgt_top1).sum())
    classes = out["confusion"]["classes"]
    assert np.array_equal(out["confusion"]["matrix"], confusion_matrix(ref_top1, tgt_top1, labels=classes))


def test_per_sample_metrics():
    ref = np.array([[1.0, 0.0], [1.0, 1.0], [2.0, 0.0]])
    tgt = np.array([[1.0, 0.0], [1.0, -1.0], [1.0, 0.0]])
    cos = per_sample(tgt, ref, "cosine", ["a", "b", "c"])
    assert cos["metric_worst"] == pytest.approx(0.0) and cos["worst"][0]["name"] == "b"
    rel = per_sample(tgt, ref, "rel_l2", ["a", "b", "c"])
    assert rel["metric_worst"] == pytest.approx(np.sqrt(2)) and rel["worst"][0]["name"] == "b"
    tok = per_sample(np.array([[1, 2, 3], [1, 2, 4]]), np.array([[1, 2, 3], [1, 2, 3]]), "token_match", ["a", "b"])
    assert tok["metric_mean"] == pytest.approx(5 / 6)
    boxes_ref = np.array([[[0, 0, 2, 2, 0.9], [5, 5, 6, 6, 0.1]]], dtype=float)    # the second scores too low
    boxes_tgt = np.array([[[0, 0, 2, 1, 0.8], [5, 5, 6, 6, 0.2]]], dtype=float)
    assert per_sample(boxes_tgt, boxes_ref, "iou", ["a"])["metric_mean"] == pytest.approx(0.5)


class _Classifier(torch.nn.Module):
    """Logits = the input: a sample whose class-1 logit beats class 0's by 2e-4 near 1.0 is a tie in fp16 and in
    int8, and both then answer class 0."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        with torch.no_grad():
            self.fc.weight.copy_(torch.eye(4))
            self.fc.bias.zero_()

    def forward(self, x):
        return self.fc(x)


@pytest.fixture(scope="module")
def flipped_run(tmp_path_factory):
    from xc_core.api import analyze
    tmp = tmp_path_factory.mktemp("accuracy")
    torch.export.save(torch.export.export(_Classifier().eval(), (torch.zeros(1, 4),)), str(tmp / "clf.pt2"))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    labels = x.argmax(1)
    ties = np.arange(0, 40, 5)
    x[ties] = [1.0, 1.0002, 0.1, 0.2]
    labels[ties] = 1
    np.savez(tmp / "data.npz", x=x, labels=labels)
    report = analyze(str(tmp / "clf.pt2"), ["ort-cpu", "ort-cpu-int8"], data=str(tmp / "data.npz"),
                     out_dir=str(tmp / "run"), isolate=False)
    return report, ties, str(tmp / "run")


def test_the_lower_precision_target_flips_exactly_the_near_ties(flipped_run):
    report, ties, _ = flipped_run
    assert report["dataset"]["samples"] == 40 and report["dataset"]["labels"] == "data.npz: labels"
    exact, int8 = report["targets"]["ort-cpu"]["accuracy"], report["targets"]["ort-cpu-int8"]["accuracy"]
    assert exact["changed_count"] == 0 and exact["accuracy"] == 1.0 and exact["evidence"] == "measured"
    assert int8["task"] == "classification" and int8["samples_run"] == 40
    assert [c["sample"] for c in int8["changed"]] == ties.tolist()
    assert all(c["reference"] == 1 and c["target"] == 0 and c["label"] == 1 for c in int8["changed"])
    assert int8["accuracy"] == pytest.approx(0.8) and int8["reference_accuracy"] == 1.0
    assert int8["confusion"]["matrix"][1][0] == len(ties)


def test_every_view_says_it(flipped_run):
    from xc_core.cli import _finish  # noqa: F401 — the CLI prints accuracy_lines, one per target
    from xc_core.review.html import report_html
    from xc_core.review.markdown import report_markdown
    from xc_core.views.accuracy import accuracy_lines
    report, ties, _ = flipped_run
    lines = dict((tid, s) for tid, s, _ in accuracy_lines(report))
    assert lines["ort-cpu-int8"] == "top-1 100.0 % → 80.0 % (−20.0 points, 8 of 40 samples change class)"
    md = report_markdown(report)
    assert "#### Accuracy on data.npz (40 samples, labels from data.npz: labels)" in md
    assert "8 of 40 samples change class" in md
    assert "Accuracy on data.npz" in report_html(report)


def test_the_overview_and_drift_pages_show_it(flipped_run):
    from streamlit.testing.v1 import AppTest
    report, ties, _ = flipped_run
    for page in ("overview", "drift"):
        at = AppTest.from_file(os.path.join(ROOT, "pages", f"{page}.py"), default_timeout=300)
        at.session_state["_xc_routed"] = True
        at.session_state["report"] = report
        at.run()
        assert not at.exception, at.exception
        headers = [h.value for h in at.subheader]
        assert any(h.startswith("Accuracy on") for h in headers), headers
        if page == "overview":
            assert any("8 of 40 samples change class" in m.value for m in at.markdown)
            # the changed samples themselves, by target, beside the sentences
            listed = [t for t in (d.value for d in at.dataframe) if "sample" in t.columns and "target" in t.columns
                      and "name" in t.columns]
            assert listed and sorted(listed[0]["sample"].tolist()) == ties.tolist()
            assert set(listed[0]["target"]) == {"ort-cpu-int8"}


class _ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def test_the_dataset_run_leaves_the_analysis_run_s_per_layer_values_alone(tmp_path):
    """Core ML's MIL interpreter records the values of its last run, which per-layer drift reads: the dataset's
    samples run after everything that reads the analysis run, so its per-layer drift is the same with or without
    a dataset (it once compared the last sample's values with the analysis input's: rel L2 1.3 at a conv whose
    output drifted 4e-4)."""
    from xc_core.api import analyze
    torch.manual_seed(0)
    torch.export.save(torch.export.export(_ConvNet().eval(), (torch.zeros(1, 3, 8, 8),)), str(tmp_path / "m.pt2"))
    np.savez(tmp_path / "data.npz", x=np.random.default_rng(1).normal(size=(6, 1, 3, 8, 8)).astype(np.float32))

    def layer_points(**data):
        report = analyze(str(tmp_path / "m.pt2"), ["coreml-ane"], isolate=False, **data)
        points = report["targets"]["coreml-ane"]["layer_drift"]["points"]
        return {p["source_op"]: p["rel_l2"] for p in points}, report
    without, _ = layer_points()
    with_data, report = layer_points(data=str(tmp_path / "data.npz"))
    assert report["targets"]["coreml-ane"]["accuracy"]["samples_run"] == 6
    assert without and with_data == pytest.approx(without)
    assert max(without.values()) < 0.01


def test_an_image_like_sample_opens_as_an_image_by_whole_pixels():
    from xc_core.views.accuracy import as_image
    digit = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
    image = as_image(digit)
    assert image.shape == (160, 160) and image.dtype == np.uint8
    assert (image[:20, :20] == 0).all() and (image[-20:, -20:] == 255).all()     # each pixel a 20×20 block
    assert as_image(np.zeros((1, 3, 32, 32))).shape == (160, 160, 3)
    assert as_image(np.zeros((1, 24))) is None                                   # token ids are not an image
