"""Workers are confined: no credential of the parent's environment reaches them (not in os.environ, not in their
/proc environ, not in the forkserver's), HOME and the temp folders are inside the job folder, and where the kernel
has Landlock a worker cannot write outside the folders its job may write, nor open TCP connections."""
import json
import os
import socket
import subprocess
import sys

import pytest

from xc_core.worker import Job, WorkerLimits, landlock_status, run_jobs, worker_environment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
SECRETS = {"AWS_SECRET_ACCESS_KEY": "aws-s3cr3t", "GITHUB_TOKEN": "ghp-s3cr3t", "HF_TOKEN": "hf-s3cr3t",
           "DB_PASSWORD": "pw-s3cr3t", "XC_API_TOKEN": "xc-s3cr3t", "OPENAI_API_KEY": "sk-s3cr3t"}
LANDLOCK = landlock_status()["abi"]


# -- job functions (imported by name in the child) ------------------------------------------------------------
def job_environment(args, workdir, phase):
    import tempfile
    out = {"environ": dict(os.environ), "tempdir": tempfile.gettempdir(), "home": os.path.expanduser("~"),
           "mkstemp": tempfile.mkstemp()[1]}
    with open("/proc/self/environ", "rb") as f:
        out["proc_self"] = f.read().decode("utf-8", "replace")
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:      # the forkserver
            out["proc_forkserver"] = f.read().decode("utf-8", "replace")
    except OSError as e:
        out["proc_forkserver"] = f"refused: {e}"
    # What a compiler the worker starts sees.
    out["child_env"] = subprocess.run(["env"], capture_output=True, text=True).stdout
    return out


def job_write(args, workdir, phase):
    out = {}
    for name, path in args["paths"].items():
        try:
            with open(path, "w") as f:
                f.write("x")
            out[name] = "written"
        except OSError as e:
            out[name] = f"refused: {e.strerror}"
    try:
        os.remove(args["existing"])
        out["remove"] = "removed"
    except OSError as e:
        out["remove"] = f"refused: {e.strerror}"
    try:
        socket.create_connection(("127.0.0.1", args["port"]), timeout=5).close()
        out["tcp"] = "connected"
    except OSError as e:
        out["tcp"] = f"refused: {e.strerror}"
    return out


_PARENT = """
import json, os, sys, tempfile
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from xc_core.worker import Job, WorkerLimits, run_jobs
work = tempfile.mkdtemp(dir=sys.argv[3])
out = run_jobs([Job("env", "test_worker_confinement:job_environment", {}, os.path.join(work, "job"))],
               WorkerLimits(120, 4))["env"]
print(json.dumps({"ok": out.ok, "error": out.error, "detail": out.detail, "value": out.value, "work": work}))
"""


def test_a_worker_sees_no_secret_of_its_parent_and_keeps_home_and_temp_in_its_job_folder(tmp_path):
    # A fresh parent process: its forkserver starts with the secrets in the parent's environment.
    env = {**os.environ, **SECRETS, "OMP_NUM_THREADS": "1", "LC_ALL": "C.UTF-8"}
    r = subprocess.run([sys.executable, "-c", _PARENT, ROOT, HERE, str(tmp_path)], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["ok"], (res["error"], res["detail"])
    v = res["value"]
    job = os.path.join(res["work"], "job")
    for name, value in SECRETS.items():
        assert name not in v["environ"]
        for where in ("proc_self", "proc_forkserver", "child_env"):
            assert value not in v[where], (name, where)
    assert v["environ"]["PATH"] == os.environ["PATH"]               # what the toolchains need stays
    assert v["environ"]["OMP_NUM_THREADS"] == "1" and v["environ"]["LC_ALL"] == "C.UTF-8"
    for key in ("HOME", "TMPDIR", "TEMP", "TMP"):
        assert v["environ"][key].startswith(job + os.sep), key
    assert v["home"].startswith(job + os.sep) and v["tempdir"].startswith(job + os.sep)
    assert v["mkstemp"].startswith(job + os.sep)
    assert "HOME=" + os.path.join(job, "home") in v["child_env"]


def test_the_environment_is_an_allow_list_without_credentials():
    env = worker_environment({**SECRETS, "PATH": "/bin", "OMP_NUM_THREADS": "2", "XC_HOME": "/x", "LC_ALL": "C",
                              "HOME": "/root", "TMPDIR": "/tmp", "SSH_AUTH_SOCK": "/s", "HTTPS_PROXY": "http://u:p@h",
                              "TORCHINDUCTOR_CACHE_DIR": "/c", "MKL_NUM_THREADS": "2", "XC_SESSION_KEY": "k"},
                             "/job")
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "2", "XC_HOME": "/x", "LC_ALL": "C", "MKL_NUM_THREADS": "2",
                   "TORCHINDUCTOR_CACHE_DIR": "/c", "HOME": "/job/home", "TMPDIR": "/job/tmp", "TEMP": "/job/tmp",
                   "TMP": "/job/tmp"}


@pytest.mark.skipif(not LANDLOCK, reason=f"no Landlock here: {landlock_status()['why']}")
def test_with_landlock_a_worker_cannot_write_outside_its_folders_nor_connect(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    existing = outside / "keep.txt"
    existing.write_text("mine")
    run_dir = tmp_path / "run"
    job_dir = run_dir / "work" / "job"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        args = {"paths": {"job": str(job_dir / "inside.txt"), "run": str(run_dir / "artifact.txt"),
                          "outside": str(outside / "new.txt"), "devnull": os.devnull},
                "existing": str(existing), "port": listener.getsockname()[1]}
        out = run_jobs([Job("w", "test_worker_confinement:job_write", args, str(job_dir), writable=(str(run_dir),))],
                       WorkerLimits(120, 4))["w"]
    finally:
        listener.close()
    assert out.ok, (out.error, out.detail)
    v = out.value
    assert v["job"] == v["run"] == v["devnull"] == "written"
    assert v["outside"].startswith("refused") and not (outside / "new.txt").exists()
    assert v["remove"].startswith("refused") and existing.read_text() == "mine"
    if LANDLOCK >= 4:
        assert v["tcp"].startswith("refused"), v["tcp"]


def test_without_landlock_the_job_runs_unconfined_by_it(tmp_path, monkeypatch):
    """XC_LANDLOCK=0 (the escape hatch) is honoured in the worker: the same write outside then succeeds."""
    monkeypatch.setenv("XC_LANDLOCK", "0")
    assert landlock_status() == {"abi": 0, "why": "turned off (XC_LANDLOCK=0)"}
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    args = {"paths": {"outside": str(outside / "new.txt")}, "existing": str(outside / "keep.txt"), "port": 9}
    out = run_jobs([Job("w", "test_worker_confinement:job_write", args, str(tmp_path / "job"))],
                   WorkerLimits(120, 4))["w"]
    assert out.ok and out.value["outside"] == "written"


@pytest.mark.slow
def test_the_report_says_how_workers_were_confined(sample_report):
    report, _ = sample_report("vision-mini", ("ort-cpu",))
    c = report["run"]["confinement"]
    assert c["environment"].startswith("allow-list") and "job folder" in c["home_and_temp"]
    assert ("landlock_abi" in c) == bool(LANDLOCK)
