"""SIGTERM to `python -m xc_core analyze` while targets compile: the CLI kills its workers' process groups, removes
its scratch folders, says so in one line and exits 143 (128 + SIGTERM)."""
import glob
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_sigterm_stops_the_workers_removes_the_scratch_and_says_so(tmp_path):
    home, out = tmp_path / "home", tmp_path / "out"
    # A fresh XC_HOME: Inductor compiles C++ with a cold cache (tens of seconds), so the signal lands mid-compile.
    env = {**os.environ, "XC_HOME": str(home), "TORCHINDUCTOR_CACHE_DIR": str(home / "cache" / "inductor")}
    proc = subprocess.Popen([sys.executable, "-m", "xc_core", "analyze", "sample:tts-mini", "--targets",
                             "inductor-cpu,coreml-ane", "--jobs", "2", "--out", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        started = []
        while not started and proc.poll() is None and time.monotonic() < deadline:
            # a target's worker is running once its job folder has its stderr.log
            started = glob.glob(str(out / "work" / "*-inductor-cpu" / "stderr.log"))
            time.sleep(0.2)
        assert started, "no target worker started"
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert len(workers) >= 2          # the forkserver and at least one worker
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, stderr
    lines = [line for line in stderr.splitlines() if "SIGTERM" in line]
    assert lines == ["xc: stopped by SIGTERM; workers stopped, scratch removed"], stderr
    assert stderr.rstrip().splitlines()[-1] == lines[0]
    assert "Traceback" not in stderr and "internal error" not in stderr
    gone, alive = psutil.wait_procs(workers, timeout=60)
    assert not alive, [(p.pid, _cmdline(p)) for p in alive]
    assert not os.path.exists(out / "work")                     # the workers' job folders
    assert not os.listdir(home / "work") if os.path.isdir(home / "work") else True
    assert not os.path.exists(out / "report.json")


def _cmdline(p) -> list[str]:
    try:
        return p.cmdline()
    except psutil.Error:
        return []
