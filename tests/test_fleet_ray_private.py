"""The Ray that `xc batch --backend ray` starts for itself is private, as the machine shows it while a batch runs on
it: every socket its processes listen on is on loopback, a driver without the run's token is turned away while one
with it gets in, the token is in no output, report, log or file and only in Ray's own processes, and nothing of that
Ray is left after. Joining a cluster without token authentication says so, once."""
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
pytestmark = pytest.mark.skipif(not os.path.exists(RAY), reason="Ray is not installed")

# A driver joining the cluster at argv[1]. RAY_gcs_server_port_wait_time_s shortens Ray's 20 s of retries for the
# one that is turned away.
JOIN = "import sys, ray; ray.init(address=sys.argv[1], log_to_driver=False); print('joined')"


def _batch_looking_in(look_path: str, argv: list[str]) -> int:
    """Runs as the `xc batch` process: `xc batch ARGV`, and when its first model is done (the Ray it started is up,
    its workers too, and waits for this) writes to look_path what the machine shows of that Ray."""
    import xc_core.fleet.batch as batch
    from xc_core.cli import main
    run_batch = batch.run_batch

    def looking(*args, on_model=None, **kwargs):
        def first_look(row, cells):
            if not os.path.exists(look_path):
                _look(look_path)
            on_model(row, cells)
        return run_batch(*args, on_model=first_look, **kwargs)
    batch.run_batch = looking           # _batch imports it when it runs
    code = main(argv)
    with open(look_path) as f:
        seen = json.load(f)
    seen["token_after"] = os.environ.get("RAY_AUTH_TOKEN")
    with open(look_path, "w") as f:
        json.dump(seen, f)
    return code


def _look(look_path: str) -> None:
    """This process and every process under it (Ray's GCS, raylet, agents, workers, and what the tasks started):
    their listening sockets and whether the token is in their environment; then two drivers try the cluster."""
    import psutil
    import ray
    token = os.environ["RAY_AUTH_TOKEN"]
    me = psutil.Process()
    processes, listening = [], []
    for p in [me, *me.children(recursive=True)]:
        try:
            name, cmdline = p.name(), " ".join(p.cmdline())
            sockets = [c for c in p.net_connections(kind="inet")
                       if c.status == psutil.CONN_LISTEN or c.type == socket.SOCK_DGRAM]
            has_token = p.environ().get("RAY_AUTH_TOKEN") == token
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        processes.append({"pid": p.pid, "name": name, "cmdline": cmdline[:300], "has_token": has_token})
        listening += [{"pid": p.pid, "process": name, "ip": c.laddr.ip, "port": c.laddr.port} for c in sockets]
    gcs = ray.get_runtime_context().gcs_address
    plain = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    joins = {}
    for who, env in (("without", plain), ("with", {**plain, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token})):
        r = subprocess.run([sys.executable, "-c", JOIN, gcs], env={**env, "RAY_gcs_server_port_wait_time_s": "3"},
                           capture_output=True, text=True, timeout=240)
        joins[who] = {"code": r.returncode, "output": (r.stdout + r.stderr)[-3000:]}
    with open(look_path, "w") as f:
        json.dump({"driver": me.pid, "gcs": gcs, "token": token, "processes": processes, "listening": listening,
                   "joins": joins}, f)


def _on_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)      # ::ffff:127.0.0.1, a dual-stack socket's IPv4 loopback
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _ray_process(p: dict) -> bool:
    return (p["name"] in ("gcs_server", "raylet") or p["name"].startswith("ray::")
            or f"{os.sep}ray{os.sep}" in p["cmdline"])


def _running(process) -> bool:
    import psutil
    try:
        return process.status() != psutil.STATUS_ZOMBIE     # a zombie is only a name until its parent reaps it
    except psutil.NoSuchProcess:
        return False


def _files_holding(text: str, *folders: str) -> list[str]:
    found = []
    for folder in folders:
        for parent, _dirs, names in os.walk(folder):
            for name in names:
                path = os.path.join(parent, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        if text.encode() in f.read():
                            found.append(path)
    return found


@pytest.mark.slow
def test_the_ray_a_batch_starts_listens_on_loopback_wants_its_token_and_goes(tmp_path):
    import psutil

    from test_fleet import _conv, _two_output_mlp
    from test_fleet_ray import _stop
    _two_output_mlp(str(tmp_path / "mlp.onnx"))
    _conv(str(tmp_path / "conv.onnx"))
    (tmp_path / "fleet.txt").write_text("mlp.onnx\nconv.onnx\n")
    ray_temp = tempfile.mkdtemp(prefix="xr", dir="/tmp")     # short: Ray's socket paths live under it
    look = tmp_path / "look.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    (tmp_path / "home").mkdir()
    env.update(XC_HOME=str(tmp_path / "xc-home"), HOME=str(tmp_path / "home"), RAY_TMPDIR=ray_temp)
    argv = ["batch", str(tmp_path / "fleet.txt"), "--out", str(tmp_path / "out"), "--backend", "ray",
            "--targets", "ort-cpu"]
    code = (f"import sys; sys.path[:0] = [{ROOT!r}, {HERE!r}]; import test_fleet_ray_private as t; "
            f"sys.exit(t._batch_looking_in({str(look)!r}, {argv!r}))")
    try:
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        seen = json.loads(look.read_text())
        with open(tmp_path / "out" / "matrix.json") as f:
            matrix = json.load(f)
        assert matrix["complete"] and all(c["status"] == "ok" for c in matrix["cells"]), matrix["cells"]

        # Every socket any of its processes listens on is on loopback: the GCS, the raylet's node and object
        # managers, the runtime-env agent, the workers (and this driver).
        listening = seen["listening"]
        assert listening and all(_on_loopback(s["ip"]) for s in listening), listening
        names = [s["process"] for s in listening]
        assert "gcs_server" in names and names.count("raylet") == 2, names
        assert any(n.startswith("ray::") and "Agent" not in n for n in names), names        # a task's worker
        assert int(seen["gcs"].rpartition(":")[2]) in {s["port"] for s in listening}

        # A driver without the token is turned away by that cluster; with it, the same driver gets in.
        without, with_token = seen["joins"]["without"], seen["joins"]["with"]
        assert without["code"] != 0 and "Unauthenticated" in without["output"], without
        assert with_token["code"] == 0 and "joined" in with_token["output"], with_token

        # The token: a fresh random one, in Ray's own processes' environment only (xc's analysis workers get an
        # allow-listed one), in no output, report, run store, Ray log or file, and gone from the environment after.
        token = seen["token"]
        assert len(token) == 64 and int(token, 16) >= 0
        holders = [p for p in seen["processes"] if p["has_token"]]
        assert all(p["pid"] == seen["driver"] or _ray_process(p) for p in holders), holders
        analysis_workers = [p for p in seen["processes"] if "multiprocessing" in p["cmdline"]]
        assert analysis_workers and not any(p["has_token"] for p in analysis_workers), analysis_workers
        assert token not in r.stdout + r.stderr
        assert not _files_holding(token, str(tmp_path / "out"), str(tmp_path / "xc-home"), ray_temp,
                                  str(tmp_path / "home"))
        assert not os.path.exists(tmp_path / "home" / ".ray" / "auth_token")
        assert seen["token_after"] is None

        # Nothing of that Ray outlives the batch.
        left = []
        for p in seen["processes"]:
            try:
                left.append(psutil.Process(p["pid"]))
            except psutil.NoSuchProcess:
                pass
        _gone, alive = psutil.wait_procs(left, timeout=30)
        assert not [p for p in alive if _running(p)], [(p.pid, p.name()) for p in alive]
    finally:
        _stop(ray_temp)
        shutil.rmtree(ray_temp, ignore_errors=True)


@pytest.mark.slow
def test_joining_a_cluster_without_authentication_warns_once(tmp_path):
    from test_fleet import _two_output_mlp
    from test_fleet_ray import _free_port, _stop
    _two_output_mlp(str(tmp_path / "mlp.onnx"))
    (tmp_path / "fleet.txt").write_text("mlp.onnx\n")
    ray_temp = tempfile.mkdtemp(prefix="xr", dir="/tmp")
    port = _free_port()
    # A cluster without authentication, so this test keeps it on loopback (a head node alone can be): with
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, for the cluster and for the driver joining it, Ray keeps 127.0.0.1 as it is.
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    head_env = {**env, "RAY_AUTH_MODE": "disabled"}
    try:
        head = subprocess.run([RAY, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                               "--num-cpus=1", "--include-dashboard=false", "--disable-usage-stats",
                               f"--temp-dir={ray_temp}"], env=head_env, capture_output=True, text=True, timeout=180)
        assert head.returncode == 0, head.stderr[-2000:]
        r = subprocess.run([sys.executable, "-m", "xc_core", "batch", str(tmp_path / "fleet.txt"), "--out",
                            str(tmp_path / "out"), "--backend", "ray", "--ray-address", f"127.0.0.1:{port}",
                            "--targets", "ort-cpu"], env={**env, "XC_HOME": str(tmp_path / "xc-home")},
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        warnings = [line for line in r.stderr.splitlines() if "warning" in line]
        assert len(warnings) == 1, r.stderr
        assert f"127.0.0.1:{port}" in warnings[0] and "without a token" in warnings[0] and "run code" in warnings[0]
    finally:
        _stop(ray_temp)
        shutil.rmtree(ray_temp, ignore_errors=True)


@pytest.mark.slow
def test_a_process_that_imported_ray_first_is_told_at_once(tmp_path, monkeypatch):
    """Ray reads its authentication mode and node address rule on import: one imported before xc set them would
    start a cluster that is neither private nor reachable by this driver, so it is refused before anything starts."""
    import threading
    import types

    from xc_core.errors import XcInputError
    from xc_core.fleet.batch import BatchSettings
    from xc_core.fleet.ray_backend import run_ray
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(is_initialized=lambda: False))
    for name in ("RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    settings = BatchSettings(targets=["ort-cpu"], out_dir=str(tmp_path), backend="ray")
    with pytest.raises(XcInputError, match="imported in this process before"):
        run_ray([], settings, lambda outcome: None, threading.Event())
    assert "RAY_AUTH_TOKEN" not in os.environ
