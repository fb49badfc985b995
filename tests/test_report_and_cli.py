"""report.json validates against the schema kept in the repo; the CLI exits 0 / 2 as documented."""
import json
import os
import re
import subprocess
import sys

import jsonschema
import numpy as np
import pytest
import torch

from tiny_models import conv_bn_relu
from xc_core.report.schema import schema, validate_report
from xc_core.targets import REGISTRY

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVIDENCE = {"measured", "reported", "predicted-runtime", "predicted-rules", "emulated"}


def cli(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": ROOT}  # `python -m xc_core` from any folder, as CI scripts call it
    return subprocess.run([sys.executable, "-m", "xc_core", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


def _check_report(report, targets=("ort-cpu", "openvino-cpu")):
    validate_report(report)
    for tid in targets:
        t = report["targets"][tid]
        assert t["status"] == "ok", (tid, t["error"])
        if "bf16" in t["precision"]["mix"]:
            # OpenVINO on a bf16-capable CPU (AMX / avx512_bf16) tokenizes other subgraphs in bf16 than in fp32:
            # transformer-mini keeps 68 ops there (fused groups, yet no fewer ops); in fp32 it drops below that.
            assert t["op_count_after"] <= t["op_count_before"], tid
        else:
            assert t["op_count_after"] < t["op_count_before"], tid
        assert t["fusions"]["groups"] and all(len(g["absorbed"]) >= 2 for g in t["fusions"]["groups"])
        for n in t["graph"]["nodes"]:
            if n["kind"] == "compute":
                assert n["backend"] and n["precision"] and n["precision"] != "unknown", (tid, n["id"])
        for m in t["drift"]["outputs"].values():
            assert all(k in m for k in ("max_abs", "mean_abs", "rel_l2", "cosine", "snr_db", "min_atol",
                                        "min_rtol"))
        for block in ("op_counts", "fusions", "precision", "graph", "drift"):
            assert t[block]["evidence"] in EVIDENCE, (tid, block)


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["vision-mini", "tts-mini", "transformer-mini"])
def test_samples_on_ort_and_openvino(sample_report, sample):
    report, _ = sample_report(sample)
    _check_report(report)


@pytest.mark.slow
def test_report_targets_have_the_fields_the_issue_names(sample_report):
    report, _ = sample_report("tts-mini")
    validate_report(report)
    for tid, t in report["targets"].items():
        assert t["status"] == "ok", tid
        for n in t["graph"]["nodes"]:
            if n["kind"] == "compute":
                assert n["backend"] and n["precision"] not in (None, "unknown"), (tid, n["id"])


def test_cli_analyze_writes_a_valid_report(tmp_path):
    out = tmp_path / "out"
    r = cli("analyze", "sample:vision-mini", "--targets", "ort-cpu,openvino-cpu,ort-cpu-int8", "--out", str(out),
            "--md", str(tmp_path / "comment.md"), "--html", str(tmp_path / "report.html"), "--max-int8-nodes", "20")
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    _check_report(report)
    # Above --max-int8-nodes the int8 target is skipped in its worker, with the size and the limit in the report.
    int8 = report["targets"]["ort-cpu-int8"]
    assert int8["status"] == "unavailable" and "above the 20-node limit" in int8["error"], int8["error"]
    assert int8["info"]["skipped_above_size"] == {"nodes": 47, "limit": 20, "why": int8["error"]}
    assert "--max-int8-nodes" in int8["error"] and "XC_MAX_INT8_NODES" in int8["error"]
    assert (out / "artifacts" / "ort-cpu" / "model.optimized.onnx").exists()
    assert (out / "artifacts" / "openvino-cpu" / "runtime_model.xml").exists()
    assert re.search(r"^ort-cpu\s+ok\s", r.stdout, re.M)
    # Every artifact the report names resolves from the report's own folder. The Model Explorer export is made when
    # asked for, from the report: none in the run, a folder (or a zip) from `xc report --format model-explorer`.
    for t in report["targets"].values():
        assert t["status"] != "ok" or t["artifacts"]
        assert all((out / p).exists() for p in t["artifacts"])
    assert not (out / "model_explorer").exists() and "exports" not in report
    me = cli("report", str(out), "--format", "model-explorer", "--out", str(tmp_path / "me"))
    assert me.returncode == 0, me.stderr
    index = json.loads((tmp_path / "me" / "index.json").read_text())
    assert {"captured", "ort-cpu", "openvino-cpu"} <= set(index["graphs"]) and "README.txt" in me.stderr
    refused = cli("report", str(out), "--format", "model-explorer")
    assert refused.returncode != 0 and "--out DIR" in refused.stderr and "Traceback" not in refused.stderr
    assert (tmp_path / "comment.md").read_text().startswith("### xc: vision-mini")
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.slow
def test_cli_pt2_pt_and_onnx_files(tmp_path):
    model, args = conv_bn_relu()
    ep = torch.export.export(model, args)
    torch.export.save(ep, str(tmp_path / "m.pt2"))
    torch.jit.script(model).save(str(tmp_path / "m.pt"))
    torch.onnx.export(model, args, str(tmp_path / "m.onnx"), dynamo=True, input_names=["x"])
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32))
    for src, extra in (("m.pt2", []), ("m.pt", ["--inputs", str(tmp_path / "in.npz")]), ("m.onnx", [])):
        out = tmp_path / ("out-" + src)
        # OpenVINO runs bf16 by itself on bf16-capable CPUs; these fp32 bounds need its fp32 kernels.
        r = cli("analyze", str(tmp_path / src), "--targets", "all", "--out", str(out), *extra,
                "--option", "openvino-cpu.inference_precision=f32")
        assert r.returncode == 0, (src, r.stderr)
        report = json.loads((out / "report.json").read_text())
        validate_report(report)
        assert report["reference"]["id"] == ("onnx-reference" if src.endswith(".onnx") else "torch")
        for tid, t in report["targets"].items():
            assert t["status"] == "ok", (src, tid, t["error"])
            if src.endswith(".onnx") and REGISTRY[tid.split("[")[0]].takes_program:   # ONNX → PyTorch → target
                drift = t["info"]["onnx_conversion"]["conversion_drift"]
                assert drift and all(m["rel_l2"] < 1e-5 for m in drift.values())
            if tid.split("[")[0] in ("ort-cpu", "openvino-cpu", "ort-nnapi"):   # fp32 numerics, measured
                assert t["drift"]["worst"]["rel_l2"] < 1e-4, tid


def _text_onnx(d):
    (d / "x.onnx").write_text("hello, I am a text file\n")
    return d / "x.onnx"


def _truncated_pt2(d):
    model, args = conv_bn_relu()
    torch.export.save(torch.export.export(model, args), str(d / "full.pt2"))
    data = (d / "full.pt2").read_bytes()
    (d / "t.pt2").write_bytes(data[: len(data) // 3])
    return d / "t.pt2"


def _pickled_module(d):
    torch.save(conv_bn_relu()[0], str(d / "w.pt"))
    return d / "w.pt"


@pytest.mark.parametrize("make,expected", [
    (_text_onnx, "x.onnx: not a valid ONNX protobuf"),
    (_truncated_pt2, "t.pt2: not a readable archive — a .pt2 file is a zip"),
    (_pickled_module, "never unpickles arbitrary objects"),
])
def test_cli_bad_inputs_exit_2_with_one_line(tmp_path, make, expected):
    path = make(tmp_path)
    r = cli("analyze", str(path), "--targets", "ort-cpu", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in r.stderr


@pytest.mark.parametrize("args,expected", [
    (["analyze", "sample:vision-mini", "--targets", "nope", "--out", "o"], "unknown target 'nope'"),
    (["analyze", "--targets", "ort-cpu"], "required: source (see xc analyze --help)"),
    # an unknown flag is reported by the top parser: the hint names the command once
    (["analyze", "sample:vision-mini", "--bogus"], "unrecognized arguments: --bogus (see xc --help)"),
    (["analyze", "sample:vision-mini", "--shape", "x=1xq", "--out", "o"], "--shape 'x=1xq'"),
    (["frobnicate"], "invalid choice"),
])
def test_cli_usage_errors_exit_2(tmp_path, args, expected):
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 2 and expected in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_analyze_without_out_writes_a_new_folder_and_says_where(tmp_path):
    r = cli("analyze", "sample:vision-mini", "--targets", "ort-cpu", "--no-store", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    folders = list((tmp_path / "xc-out").iterdir())
    assert len(folders) == 1 and re.fullmatch(r"vision-mini-\d{8}-\d{6}", folders[0].name), folders
    assert json.loads((folders[0] / "report.json").read_text())["targets"]["ort-cpu"]["status"] == "ok"
    assert (folders[0] / "artifacts" / "ort-cpu").is_dir()
    # One line says where, last, as the folder relative to where the command ran.
    assert r.stdout.strip().splitlines()[-1] == (f"wrote {os.path.join('xc-out', folders[0].name, 'report.json')} "
                                                 "(no --out given: a new folder in ./xc-out)")
    assert "default: a new folder ./xc-out/MODEL-DATE-TIME/" in " ".join(cli("analyze", "--help").stdout.split())
    # A source refused on the way: its one line, and no empty folder of ours left.
    r = cli("analyze", "missing.onnx", "--targets", "ort-cpu", cwd=tmp_path / "xc-out")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "missing.onnx: no such file" in r.stderr
    assert not (tmp_path / "xc-out" / "xc-out").exists()


def test_default_out_folders_never_reuse_an_earlier_run(tmp_path):
    from xc_core.cli import new_out_dir
    root, now = str(tmp_path / "xc-out"), 1_800_000_000.0
    made = [new_out_dir("sample:vision-mini", root, now) for _ in range(3)]
    assert made[1] == made[0] + "-2" and made[2] == made[0] + "-3"      # same second: a new folder each time
    assert all(os.path.isdir(m) and not os.listdir(m) for m in made)
    # Named after the model file, in characters any shell and file system take.
    assert os.path.basename(new_out_dir("/models/My Model v2.onnx", root, now)).startswith("My_Model_v2-")
    hostile = new_out_dir("../../<img src=x>;rm -rf.pt2", root, now)
    assert os.path.dirname(hostile) == root and re.fullmatch(r"img_src_x_rm_-rf-\d{8}-\d{6}",
                                                              os.path.basename(hostile))
    assert os.path.basename(new_out_dir("sample:", root, now)).startswith("model-")


def test_cli_lists_targets_and_samples():
    t = cli("targets")
    assert t.returncode == 0 and "ort-cpu" in t.stdout and "openvino-cpu" in t.stdout and "available" in t.stdout
    s = cli("samples")
    assert s.returncode == 0 and "sample:tts-mini" in s.stdout and "[default]" in s.stdout


@pytest.mark.slow
def test_schema_rejects_a_block_without_evidence(sample_report):
    report, _ = sample_report("vision-mini")
    broken = json.loads(json.dumps(report))
    del broken["targets"]["ort-cpu"]["drift"]["evidence"]
    with pytest.raises(ValueError, match="ort-cpu.drift"):
        validate_report(broken)
    # The fast validator xc writes with agrees with the reference implementation, both ways.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema())
    jsonschema.validate(report, schema())
    validate_report(report)


@pytest.mark.slow
def test_an_imported_report_that_breaks_the_schema_is_refused_with_where(sample_report):
    from xc_core.errors import XcInputError
    from xc_core.review.runs import parse_report
    report, _ = sample_report("vision-mini")
    assert parse_report(json.dumps(report).encode())["targets"]
    broken = json.loads(json.dumps(report))
    broken["targets"]["ort-cpu"]["drift"]["evidence"] = "guessed"
    with pytest.raises(XcInputError, match=r"report.json: not a valid xc report at targets/ort-cpu/drift/evidence"):
        parse_report(json.dumps(broken).encode())
