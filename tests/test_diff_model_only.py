"""`xc diff` on the done-when pair (tests/model_pairs.py: one inserted block, one swapped activation, one retrained
layer), analysed for real on ort-cpu and ort-nnapi: `--model-only` lists exactly those three changes (and the
renumbering, quietly) in text, Markdown and JSON; the full diff attributes the decisions they caused to them — the
NNAPI fallback of the Hardswish (ORT lowers it to HardSigmoid, which NNAPI lacks) to the replaced activation, ORT
CPU's extra conv+add fusion to the inserted block; bad flags are refused in one line."""
import json
import os

import pytest
import torch

from model_pairs import base_model, example_inputs, head_model
from xc_core.cli import main
from xc_core.review.github import comment_body

TARGETS = "ort-cpu,ort-nnapi"


@pytest.fixture(scope="module")
def pair_runs(tmp_path_factory):
    """Base and head saved under one file name (one model in two versions, as a pull request has it), analysed."""
    folder = tmp_path_factory.mktemp("model-pair")
    runs = {}
    for name, model in (("base", base_model()), ("head", head_model())):
        os.makedirs(folder / name)
        path = str(folder / name / "net.pt2")
        torch.export.save(torch.export.export(model, example_inputs()), path)
        runs[name] = str(folder / f"run-{name}")
        assert main(["analyze", path, "--targets", TARGETS, "--out", runs[name], "--quiet", "--no-store"]) == 0
    return runs


def _diff(capsys, *argv):
    code = main(["diff", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_model_only_lists_exactly_the_three_changes_and_the_renumbering(pair_runs, capsys):
    base, head = pair_runs["base"], pair_runs["head"]
    code, out, err = _diff(capsys, base, head, "--model-only")
    assert code == 0 and err == "", err
    assert out.splitlines() == [
        "Model changes: 1 block added (4 ops) · 1 op replaced · weights changed on 1 op · 2 modules renumbered",
        "  block added: blocks.1 — 4 ops (conv2d ×2, relu, add)",
        "  replaced: relu → hardswish at blocks.3.act",
        "  weights changed: linear at head.fc: head.fc.weight rel L2 0.1 (exact)",
        "  renumbered by the insertion or removal, not changed: blocks.1 → blocks.2, blocks.2 → blocks.3"]
    code, out, _ = _diff(capsys, base, head, "--model-only", "--format", "md")
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("- ")] == [
        "- block added: `blocks.1` — 4 ops (conv2d ×2, relu, add)",
        "- replaced: `relu` → `hardswish` at `blocks.3.act`",
        "- weights changed: `linear` at `head.fc`: `head.fc.weight` rel L2 0.1 (exact)"]
    code, out, _ = _diff(capsys, base, head, "--model-only", "--format", "json")
    md = json.loads(out)
    assert code == 0 and md["comparable"] and md["notes"] == []
    kinds = ("added", "removed", "replaced", "attributes", "shapes", "dtypes", "weights")
    assert {k: md["summary"][k] for k in kinds} == {"added": 4, "removed": 0, "replaced": 1, "attributes": 0,
                                                    "shapes": 0, "dtypes": 0, "weights": 1}
    assert [(b["kind"], b["module_path"]) for b in md["blocks"]] == [("added", "blocks.1")]
    assert {c["block"] for c in md["changes"] if c["kind"] == "added"} == {"blocks.1"}
    assert {(r["base"], r["new"], r["why"]) for r in md["renamed_modules"]} == \
        {("blocks.1", "blocks.2", "renumbered"), ("blocks.2", "blocks.3", "renumbered")}
    # A tolerance above the retrained layer's change: two changes left.
    code, out, _ = _diff(capsys, base, head, "--model-only", "--weight-rtol", "0.2")
    assert code == 0 and "weights" not in out and "replaced: relu → hardswish" in out


def test_the_decisions_the_model_changes_caused_are_attributed_to_them(pair_runs, capsys):
    code, out, _ = _diff(capsys, pair_runs["base"], pair_runs["head"], "--format", "json")
    d = json.loads(out)
    assert code == 0 and d["model"]["summary"]["replaced"] == 1
    fallback = next(f for f in d["targets"]["ort-nnapi"]["fallbacks"]["added"] if f["op_type"] == "HardSigmoid")
    assert fallback["module_path"] == "blocks.3.act"
    assert fallback["cause"]["kind"] == "model" and fallback["cause"]["change"] == "replaced"
    assert fallback["cause"]["text"] == "replaced in new (relu → hardswish)"
    gained = next(f for f in d["targets"]["ort-cpu"]["fusions"]["gained"] if f["pattern"] == "conv2d+add")
    assert gained["cause"]["kind"] == "model" and gained["cause"]["change"] == "added"
    assert gained["cause"]["module_path"].startswith("blocks.1")
    # Text: the model changes first (right after the two runs' names), each decision line with its cause.
    code, out, _ = _diff(capsys, pair_runs["base"], pair_runs["head"])
    lines = out.splitlines()
    assert lines[2].startswith("Model changes: 1 block added") and "source op added" not in out
    assert any(line.endswith("new CPU fallback: HardSigmoid at blocks.3.act (unsupported operator) — replaced in "
                             "new (relu → hardswish)") for line in lines), out


def test_the_pr_comment_and_the_html_page_open_with_the_model_changes(pair_runs, capsys, tmp_path):
    code, out, _ = _diff(capsys, pair_runs["base"], pair_runs["head"], "--gate", "--format", "md")
    assert code == 1          # the new NNAPI fallback is a regression under the default rules
    body, truncated = comment_body(out)
    head = body.split("| target")[0]        # before the first table
    assert not truncated and "**Model changes:** 1 block added (4 ops)" in head
    assert head.index("**Model changes:**") < head.index("regression(s)")
    page = tmp_path / "diff.html"
    code, _, _ = _diff(capsys, pair_runs["base"], pair_runs["head"], "--format", "html", "--out", str(page))
    html = page.read_text()
    assert code == 0 and html.startswith("<!DOCTYPE html>")
    assert html.index("<h2>Model changes</h2>") < html.index("<h2>Compiler decisions</h2>")
    assert "<code>blocks.1</code>" in html and "replaced in new (relu → hardswish)" in html


@pytest.mark.parametrize("flags, says", [
    (["--model-only", "--gate"], "xc: --model-only with --gate: the gate judges the compilers' decisions"),
    (["--model-fields", "ops,colours"], "xc: --model-fields 'ops,colours': 'colours' is not a field (accepted: a "
                                        "comma-separated subset of ops,attributes,shapes,dtypes,weights)"),
    (["--model-only", "--weight-rtol", "nan"], "xc: --weight-rtol 'nan': not accepted (a number ≥ 0"),
    (["--attribute-rtol", "-0.1"], "xc: --attribute-rtol '-0.1': not accepted (a number ≥ 0"),
])
def test_bad_model_flags_are_refused_in_one_line(pair_runs, capsys, flags, says):
    code, out, err = _diff(capsys, pair_runs["base"], pair_runs["head"], *flags)
    assert code == 2 and out == "" and err.startswith(says) and len(err.strip().splitlines()) == 1, err
