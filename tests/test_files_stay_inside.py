"""Files stay inside: every command that copies or reads a tree it was given (`xc batch merge`, `xc report|diff|
comment` of a run folder or report.json, `xc diff` of two batch folders, `xc batch` of a manifest) follows no
symlink out of it and reads no special file. Planted in the trees here: a symlink to /proc/self/environ (the
process environment, with a token in it), a symlink to an outside folder holding a canary file, and a FIFO.

The rule (xc_core/safe_files.py): what a command is asked to read — a matrix.json, a report.json or its sidecar,
a run folder a matrix names, a manifest, a model file a manifest names — is refused in one line (exit 2) when it is
not a regular file inside its folder; what a walk finds in a tree (a run folder's files, a folder manifest's
entries) is skipped with one warning line, and the command goes on (exit 0)."""
import json
import os
import shutil
import stat

import pytest

from test_fleet import _two_output_mlp
from xc_core.cli import main
from xc_core.review.runs import load_run

TOKEN = "ghp_canaryTOKEN0123456789"
CANARY = "CANARY-outside-file-3f1c"


def _cli(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(code, err, needle):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("xc: "), (code, err)
    assert needle in lines[0] and "internal error" not in err, err
    return lines[0]


def _nothing_leaked(folder):
    """No file under `folder` holds the token or the canary, and no entry is a symlink or special file."""
    for root, dirs, names in os.walk(folder):
        for name in dirs + names:
            st = os.lstat(os.path.join(root, name))
            assert stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode), os.path.join(root, name)
        for name in names:
            data = open(os.path.join(root, name), "rb").read()
            assert TOKEN.encode() not in data and CANARY.encode() not in data, os.path.join(root, name)
            assert b"GITHUB_TOKEN" not in data, os.path.join(root, name)


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """A real `xc batch --out` folder: one tiny model on ort-cpu (no run store: its run folder keeps every file)."""
    folder = tmp_path_factory.mktemp("shard-src")
    _two_output_mlp(str(folder / "tiny.onnx"))
    (folder / "fleet.txt").write_text("tiny.onnx\n")
    assert main(["batch", str(folder / "fleet.txt"), "--targets", "ort-cpu", "--out", str(folder / "out"),
                 "--no-store", "--quiet"]) == 0
    return folder / "out"


@pytest.fixture()
def planted(shard, tmp_path, monkeypatch):
    """A copy of the shard with runs/tiny/environ.txt → /proc/self/environ, runs/tiny/evil → an outside folder
    (with a canary file) and runs/tiny/pipe a FIFO; GITHUB_TOKEN set in this process's environment."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text(CANARY)
    copy = tmp_path / "shard"
    shutil.copytree(shard, copy)
    run = copy / "runs" / "tiny"
    os.symlink("/proc/self/environ", run / "environ.txt")
    os.symlink(outside, run / "evil")
    os.symlink(outside / "canary.txt", run / "artifacts" / "canary.txt")
    os.mkfifo(run / "pipe")
    return copy, outside


# ---- xc batch merge -----------------------------------------------------------------------------------------------
def test_merge_copies_regular_files_only_and_warns_in_one_line(planted, tmp_path, capsys):
    copy, _ = planted
    out = tmp_path / "merged"
    code, _, err = _cli(capsys, ["batch", "merge", copy, "--out", out])
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xc: warning: xc batch merge: skipped 4 entries"), err
    assert "environ.txt (a symlink out of the folder)" in lines[0] and "pipe (a FIFO)" in lines[0]
    _nothing_leaked(out)
    kept = {os.path.relpath(os.path.join(r, n), copy / "runs") for r, _, ns in os.walk(copy / "runs") for n in ns
            if os.path.isfile(os.path.join(r, n)) and not os.path.islink(os.path.join(r, n))}
    copied = {os.path.relpath(os.path.join(r, n), out / "runs") for r, _, ns in os.walk(out / "runs") for n in ns}
    assert copied == kept and "tiny/report.json" in copied
    # The merged matrix still diffs run by run against the shard.
    code, diff, err = _cli(capsys, ["diff", copy, out])
    assert code == 0 and "1 model(s) compared run by run" in diff, err


@pytest.mark.parametrize("moved", ["runs/tiny", "runs"])
def test_merge_refuses_a_run_folder_that_resolves_outside(planted, tmp_path, capsys, moved):
    """runs/tiny, or the whole runs/ folder, moved out and a symlink left in its place."""
    copy, outside = planted
    shutil.move(copy / moved, outside / "moved")
    os.symlink(outside / "moved", copy / moved)
    out = tmp_path / "merged"
    code, _, err = _cli(capsys, ["batch", "merge", copy, "--out", out])
    _refused(code, err, "runs/tiny is a symlink out of the shard's folder")
    assert not out.exists()
    # The fleet diff does not read a report through it either.
    code, _, err = _cli(capsys, ["diff", copy, copy])
    _refused(code, err, "a symlink out of the batch folder")


def test_merge_is_bounded_in_total_size(planted, tmp_path, capsys, monkeypatch):
    copy, _ = planted
    monkeypatch.setenv("XC_MAX_MERGE_MB", "0.001")
    code, _, err = _cli(capsys, ["batch", "merge", copy, "--out", tmp_path / "merged"])
    _refused(code, err, "raise it with XC_MAX_MERGE_MB=N")
    assert not (tmp_path / "merged").exists()


def test_a_matrix_json_that_is_a_symlink_out_or_special_is_refused(planted, tmp_path, capsys):
    copy, outside = planted
    shutil.copy(copy / "matrix.json", outside / "matrix.json")
    for target, needle in ((outside / "matrix.json", "a symlink out of its folder"),
                           ("/proc/self/environ", "a symlink out of its folder")):
        os.remove(copy / "matrix.json")
        os.symlink(target, copy / "matrix.json")
        for argv in (["batch", "merge", copy, "--out", tmp_path / "m"], ["diff", copy, copy]):
            code, _, err = _cli(capsys, argv)
            _refused(code, err, needle)
    fifo = tmp_path / "fifo-batch"
    fifo.mkdir()
    os.mkfifo(fifo / "matrix.json")
    code, _, err = _cli(capsys, ["diff", fifo, copy])
    _refused(code, err, "a FIFO, not a regular file")


# ---- xc report / diff / comment of a run folder or report.json ---------------------------------------------------
def test_a_run_folder_with_planted_entries_loads_its_regular_files_only(planted, capsys):
    copy, _ = planted
    run_folder = copy / "runs" / "tiny"
    run = load_run(str(run_folder))
    assert run.files and not any(k in rel for rel in run.files for k in ("environ", "evil", "pipe", "canary"))
    assert all(os.path.isfile(p) and not os.path.islink(p) for p in run.files.values())
    capsys.readouterr()
    for argv in (["report", run_folder], ["report", run_folder, "--format", "json"],
                 ["diff", run_folder, run_folder]):
        code, out, err = _cli(capsys, argv)
        assert code == 0, err
        assert TOKEN not in out and CANARY not in out
        lines = err.strip().splitlines()
        assert len(lines) <= 1 and all("skipped 4 entries" in ln for ln in lines), err


def _link_report_to_environ(run, outside):
    os.symlink("/proc/self/environ", run / "report.json")


def _link_report_out(run, outside):
    os.symlink(outside / "report.json", run / "report.json")


def _fifo_report(run, outside):
    os.mkfifo(run / "report.json")


def _link_report_to_dev_zero(run, outside):
    os.symlink("/dev/zero", run / "report.json")


def _link_sidecar_out(run, outside):
    os.symlink(outside / "canary.txt", run / "report.nodes.json.gz")


def _fifo_sidecar(run, outside):
    os.mkfifo(run / "report.nodes.json")


@pytest.mark.parametrize("plant, replaces_report, needle", [
    (_link_report_to_environ, True, "report.json: a symlink out of its folder"),
    (_link_report_out, True, "report.json: a symlink out of its folder"),
    (_fifo_report, True, "report.json: a FIFO, not a regular file"),
    (_link_report_to_dev_zero, True, "report.json: a symlink out of its folder"),
    (_link_sidecar_out, False, "report.nodes.json.gz: a symlink out of its folder"),
    (_fifo_sidecar, False, "report.nodes.json: a FIFO, not a regular file"),
])
def test_report_json_or_its_sidecar_planted_is_refused_by_report_diff_and_comment(planted, capsys, plant,
                                                                                 replaces_report, needle):
    copy, outside = planted
    run_folder = copy / "runs" / "tiny"
    shutil.copy(run_folder / "report.json", outside / "report.json")
    if replaces_report:
        os.remove(run_folder / "report.json")
    plant(run_folder, outside)
    for argv in (["report", run_folder], ["report", run_folder / "report.json"], ["diff", run_folder, run_folder],
                 ["comment", run_folder, "--pr", "1"]):
        code, out, err = _cli(capsys, argv)
        _refused(code, err, needle)
        assert TOKEN not in out + err and CANARY not in out + err


def test_special_files_named_directly_are_refused_in_one_line(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.json")
    for ref, needle in (("/proc/self/environ", "a /proc entry"), ("/dev/zero", "a device"),
                        (tmp_path / "pipe.json", "a FIFO")):
        for argv in (["report", ref], ["diff", ref, ref]):
            code, _, err = _cli(capsys, argv)
            _refused(code, err, needle)


# ---- manifests ----------------------------------------------------------------------------------------------------
def test_a_folder_manifest_lists_regular_files_only(tmp_path, capsys):
    from xc_core.fleet.manifest import read_manifest
    models, outside = tmp_path / "models", tmp_path / "outside"
    models.mkdir()
    outside.mkdir()
    _two_output_mlp(str(models / "mlp.onnx"))
    _two_output_mlp(str(outside / "elsewhere.onnx"))
    os.symlink("/proc/self/environ", models / "environ.onnx")
    os.symlink(outside / "elsewhere.onnx", models / "elsewhere.onnx")
    os.mkfifo(models / "pipe.onnx")
    manifest = read_manifest(str(models))
    assert [m.name for m in manifest.models] == ["mlp"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "skipped 3 entries" in err[0] and "environ.onnx (a symlink out of the folder)" in err[0]


def test_a_manifest_naming_special_files_is_refused_in_one_line(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.onnx")
    _two_output_mlp(str(tmp_path / "ok.onnx"))
    cases = [("fleet.txt", "ok.onnx\n/proc/self/mem\n", "model 2: model /proc/self/mem is a /proc entry"),
             ("fleet.txt", "/dev/zero\n", "model 1: model /dev/zero is a device"),
             ("fleet.txt", "pipe.onnx\n", "pipe.onnx is a FIFO"),
             ("fleet.yaml", "models:\n  - {source: ok.onnx, inputs: /dev/zero}\n", "inputs /dev/zero is a device")]
    for name, text, needle in cases:
        (tmp_path / name).write_text(text)
        code, _, err = _cli(capsys, ["batch", tmp_path / name, "--targets", "ort-cpu", "--out", tmp_path / "out"])
        _refused(code, err, needle)
        assert not (tmp_path / "out").exists()


def test_a_manifest_that_is_special_or_a_symlink_out_is_refused(tmp_path, capsys):
    inner = tmp_path / "ci"
    inner.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text(f"{TOKEN}\n")
    os.symlink(secret, inner / "fleet.txt")
    os.mkfifo(inner / "pipe.txt")
    for ref, needle in ((inner / "fleet.txt", "a symlink out of its folder"), (inner / "pipe.txt", "a FIFO"),
                        ("/proc/self/environ", "a /proc entry"), ("/dev/zero", "a device")):
        code, out, err = _cli(capsys, ["batch", ref, "--targets", "ort-cpu", "--out", tmp_path / "out"])
        _refused(code, err, needle)
        assert TOKEN not in out + err


def test_the_merge_output_is_a_matrix_that_reads_back(planted, tmp_path):
    """What merge writes is itself a valid matrix with its report paths inside the output."""
    from xc_core.fleet.matrix import read_matrix
    copy, _ = planted
    assert main(["batch", "merge", str(copy), "--out", str(tmp_path / "merged")]) == 0
    matrix, folder = read_matrix(str(tmp_path / "merged"))
    report = matrix["models"][0]["report"]
    assert os.path.isfile(os.path.join(folder, report))
    assert json.loads(open(os.path.join(folder, report)).read())["targets"]
