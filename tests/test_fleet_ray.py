"""`xc batch --backend ray` against a real Ray cluster this test starts: a head node and one worker node joined to
it (`ray start`), with token authentication (Ray puts a cluster that nodes may join on this machine's network
address, whatever --node-ip-address says). A 3-model × 2-target batch fills the matrix from Ray tasks, its runs land
in the one run store of the driver, and a second run marks every cell cached; without the token the batch is one
line at once. The Ray a batch starts for itself is in test_fleet_ray_private.py."""
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

from test_fleet import _conv, _two_output_mlp

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
pytestmark = pytest.mark.skipif(not os.path.exists(RAY), reason="Ray is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(temp_dir: str) -> None:
    """Only this cluster's processes: those that name its session folder (under temp_dir) on their command line, and
    what they started (the raylet's agents and workers retitle themselves `ray::…`). Another Ray on the machine is
    left alone, as `ray stop` would not."""
    import psutil
    procs = {}
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(temp_dir in part for part in (p.info["cmdline"] or [])):
                procs.update({q.pid: q for q in (p, *p.children(recursive=True))})
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    procs = list(procs.values())
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


@pytest.fixture(scope="module")
def ray_cluster():
    temp_dir = tempfile.mkdtemp(prefix="xr", dir="/tmp")    # short: Ray's socket paths live under it
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
           "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    try:
        head = subprocess.run([RAY, "start", "--head", f"--port={port}", "--include-dashboard=false",
                               f"--temp-dir={temp_dir}", *common], env=env, capture_output=True, text=True,
                              timeout=180)
        assert head.returncode == 0, head.stderr[-2000:]
        worker = subprocess.run([RAY, "start", f"--address=127.0.0.1:{port}", *common], env=env,
                                capture_output=True, text=True, timeout=180)
        assert worker.returncode == 0, worker.stderr[-2000:]
        yield f"127.0.0.1:{port}", env
    finally:
        _stop(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow
def test_a_batch_on_a_ray_cluster_fills_the_matrix_then_caches(tmp_path, ray_cluster):
    from xc_core.store import RunStore
    address, env = ray_cluster
    models = tmp_path / "models"
    models.mkdir()
    _two_output_mlp(str(models / "mlp.onnx"))
    _conv(str(models / "conv.onnx"))
    _two_output_mlp(str(models / "wide.onnx"), width=32, seed=7)
    (tmp_path / "fleet.yaml").write_text("targets: [ort-cpu, openvino-cpu]\nmodels:\n  - models/mlp.onnx\n"
                                         "  - models/conv.onnx\n  - {source: models/wide.onnx, name: wide-mlp}\n")
    env = {**env, "XC_HOME": str(tmp_path / "home")}

    def batch(out):
        r = subprocess.run([sys.executable, "-m", "xc_core", "batch", str(tmp_path / "fleet.yaml"), "--out", str(out),
                            "--backend", "ray", "--ray-address", address], env=env, capture_output=True, text=True,
                           timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        with open(os.path.join(out, "matrix.json")) as f:
            return json.load(f), r

    first, r = batch(tmp_path / "out1")
    assert first["backend"] == "ray" and first["complete"] and len(first["cells"]) == 6
    assert all(c["status"] == "ok" and not c["cached"] for c in first["cells"]), first["cells"]
    assert all(row["node"] for row in first["models"])           # each model ran in a Ray task, on a node
    store = RunStore(str(tmp_path / "home"))                       # the driver's store holds every run, whole
    for row in first["models"]:
        assert store.has(row["run"])
        assert any(rel.startswith("artifacts/ort-cpu/") for rel in store.files(row["run"]))
        assert os.path.isfile(tmp_path / "out1" / row["report"])
    assert "wide-mlp" in r.stderr and "on " in r.stderr            # the per-model progress lines name the node
    assert "warning" not in r.stderr                                # the cluster wants a token: nothing to say

    second, r = batch(tmp_path / "out2")
    assert all(c["cached"] for c in second["cells"]) and "6 cached" in r.stdout
    assert [row["run"] for row in second["models"]] == [row["run"] for row in first["models"]]


@pytest.mark.slow
def test_a_cluster_that_wants_a_token_this_batch_lacks_is_one_line(tmp_path, ray_cluster):
    address, env = ray_cluster
    (tmp_path / "fleet.txt").write_text("sample:vision-mini\n")
    no_token = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH")}
    r = subprocess.run([sys.executable, "-m", "xc_core", "batch", str(tmp_path / "fleet.txt"), "--out",
                        str(tmp_path / "o"), "--backend", "ray", "--ray-address", address, "--targets", "ort-cpu"],
                       env={**no_token, "XC_HOME": str(tmp_path / "home")}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "RAY_AUTH_MODE=token" in r.stderr, r.stderr


@pytest.mark.slow
def test_an_address_where_no_cluster_answers_is_one_line(tmp_path):
    (tmp_path / "fleet.txt").write_text("sample:vision-mini\n")
    r = subprocess.run([sys.executable, "-m", "xc_core", "batch", str(tmp_path / "fleet.txt"), "--out", str(tmp_path / "o"),
                        "--backend", "ray", "--ray-address", f"127.0.0.1:{_free_port()}", "--targets", "ort-cpu"],
                       env={**os.environ, "XC_HOME": str(tmp_path / "home")}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
