"""Faults end in one line: Ctrl-C anywhere in `xc analyze` (while it imports, while workers run) is one line and exit
130, with no traceback from the CLI or its forkserver; `kill -9` of the CLI takes its workers (and what they started)
with it within seconds, and the next run into the same --out sweeps the job folders the killed run left; a full disk
while writing --out is one line naming the folder, never "internal error"."""
import errno
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import psutil
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _spinning_onnx(path) -> str:
    """A valid ONNX graph whose Loop runs 10^12 times: every worker that runs it (the reference, ort-cpu) spins in
    ONNX Runtime's native code until its --timeout."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.ones(4, np.float32), "one")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body, name="spin")], "spin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(10**12, np.int64), "trips"),
         numpy_helper.from_array(np.array(True), "cond")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def _start_cli(*args, home):
    """`python -m xc_core ARGS` as a terminal starts a command: leading a process group of its own, with Ctrl-C's
    default action (a test runner in the background may have SIGINT ignored, and children inherit that)."""
    def as_a_terminal_would():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.setpgrp()
    env = {**os.environ, "XC_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "xc_core", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_a_terminal_would)


def _wait_for_workers(proc, out, deadline_s=300) -> list:
    """Wait until a target's worker runs (its job folder has its stderr.log); return the CLI's descendants then."""
    deadline = time.monotonic() + deadline_s
    while proc.poll() is None and time.monotonic() < deadline:
        if os.path.isfile(out / "work" / "01-ort-cpu" / "stderr.log"):
            return psutil.Process(proc.pid).children(recursive=True)
        time.sleep(0.2)
    raise AssertionError(f"no target worker started (exit {proc.poll()}): {proc.stderr.read() if proc.poll() else ''}")


def _cmdline(p) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return "(gone)"


@pytest.mark.slow
def test_ctrl_c_while_workers_run_is_one_line_exit_130_and_leaves_no_worker(tmp_path):
    out = tmp_path / "out"
    proc = _start_cli("analyze", _spinning_onnx(tmp_path / "spin.onnx"), "--targets", "ort-cpu", "--out", out,
                      "--timeout", "300", "--no-store", "--quiet", home=tmp_path / "home")
    try:
        descendants = _wait_for_workers(proc, out)
        assert any("forkserver" in _cmdline(p) for p in descendants) and len(descendants) >= 3
        os.killpg(proc.pid, signal.SIGINT)          # Ctrl-C at a terminal: the whole foreground process group
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert stderr.splitlines() == [f"xc: interrupted; workers stopped, scratch removed; {out} keeps the files "
                                   "written so far (no new report.json)"], stderr
    assert stdout == ""
    _gone, alive = psutil.wait_procs(descendants, timeout=30)
    assert not alive, [(p.pid, _cmdline(p)) for p in alive]
    assert not (out / "work").exists() and not (out / "report.json").exists()


def test_ctrl_c_while_the_cli_imports_is_one_line(tmp_path):
    """Signalled a moment after it starts, the CLI is importing torch and the runtimes (or its forkserver is):
    one line, no traceback from either; a shell reports 130 either way (Python ends by SIGINT when the Ctrl-C comes
    before the CLI's handlers are in place)."""
    proc = _start_cli("analyze", "sample:tts-mini", "--targets", "ort-cpu", "--out", tmp_path / "out", "--quiet",
                      "--no-store", home=tmp_path / "home")
    try:
        time.sleep(0.8)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode in (130, -signal.SIGINT), stderr
    assert len(stderr.splitlines()) == 1 and stderr.startswith("xc: interrupted"), stderr
    assert "Traceback" not in stderr + stdout


@pytest.mark.slow
def test_kill_9_takes_the_workers_along_and_the_next_run_sweeps_their_folders(tmp_path):
    from xc_core.errors import XcInputError
    from xc_core.paths import claim_work_dir, sweep_stale_work
    out = tmp_path / "out"
    proc = _start_cli("analyze", _spinning_onnx(tmp_path / "spin.onnx"), "--targets", "ort-cpu", "--out", out,
                      "--timeout", "300", "--no-store", "--quiet", home=tmp_path / "home")
    try:
        descendants = _wait_for_workers(proc, out)
        workers = [p for p in descendants if "forkserver" in _cmdline(p) and p.ppid() != proc.pid]
        assert workers      # the forkserver's children: the jobs, spinning in ONNX Runtime for up to 300 s
        proc.kill()
        proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    _gone, alive = psutil.wait_procs(descendants, timeout=20)
    assert not alive, [(p.pid, _cmdline(p)) for p in alive]
    # The killed run never removed its job folders: the next run into the folder does, before its own jobs.
    assert (out / "work" / "01-ort-cpu").is_dir()
    assert sweep_stale_work(str(out)) is None and not (out / "work").exists()
    # A folder a live run is writing into is not swept from under it: the second run is refused in one line.
    claim_work_dir(str(out))
    with pytest.raises(XcInputError, match=r"another xc run \(process \d+\) is writing into this folder"):
        claim_work_dir(str(out))
    assert sweep_stale_work(str(out)) == os.getpid()
    import shutil
    shutil.rmtree(out / "work")


@pytest.mark.slow
def test_the_cli_says_a_full_disk_in_one_line_naming_the_folder(tmp_path):
    """A tmpfs of 64 kB as --out: torch's writer fails with "unexpected pos" while the capture saves the program."""
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root); test_a_short_write_... covers the mapping")
    try:
        env = {**os.environ, "XC_HOME": str(tmp_path / "home")}
        r = subprocess.run([sys.executable, "-m", "xc_core", "analyze", "sample:tts-mini", "--targets", "ort-cpu",
                            "--out", str(full / "o"), "--no-store", "--quiet"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
    finally:
        subprocess.run(["umount", str(full)], check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [r.stderr.strip()] and r.stderr.startswith("xc: No space left on device ("), \
        r.stderr
    assert f"{full / 'o'} has " in r.stderr and "internal error" not in r.stderr and "unexpected pos" not in r.stderr


@pytest.mark.parametrize("error", [
    RuntimeError("capturing it (torch.export / ONNX export): RuntimeError: [enforce fail at inline_container.cc:672]"
                 " . unexpected pos 8448 vs 8336"),
    OSError(errno.ENOSPC, "No space left on device"),       # a write() that found no space names no file
])
def test_a_short_write_or_a_nameless_enospc_names_the_out_folder(tmp_path, monkeypatch, capsys, error):
    import xc_core.api
    from xc_core.cli import main

    def full(*a, **k):
        raise error
    monkeypatch.setattr(xc_core.api, "analyze", full)
    out = tmp_path / "out"
    assert main(["analyze", "sample:tts-mini", "--targets", "ort-cpu", "--out", str(out), "--no-store"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("xc: No space left on device (") and f"{out} has " in err, err
    assert "internal error" not in err and "unexpected pos" not in err
