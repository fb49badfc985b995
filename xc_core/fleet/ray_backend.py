"""`xc batch --backend ray`: each model's analysis a Ray task, for when one machine is not enough.

A task asks for `ray_cpus` CPUs (its analysis runs that many worker processes at once) and `ray_memory_gib` of
memory, so Ray places it where both are free; the worker limits (--timeout, --memory) still bound each worker
process inside it. The task analyses into a scratch folder on its node and returns the Report and the run's
files as data; the driver — the `xc batch` process — writes them and records them in its one run store. Sources
are read by path on the node that runs the task: on a cluster of several machines, keep models in a folder every
node mounts at the same path (a `sample:` needs nothing).

With `--ray-address` the batch joins that cluster; without, it starts a Ray on this machine for the run and stops
it after.
"""
from __future__ import annotations

import os
import shutil
import time

from ..errors import XcInputError
from ..paths import write_bytes_atomic
from .matrix import RUNS_DIR

# A Ray task that dies (its node lost, its worker process killed) is tried once more, then is that model's error.
MAX_RETRIES = 1


def run_ray(pending, settings, finish, cancel) -> None:
    ray = _import_ray()
    started_here = _connect(ray, settings)
    try:
        remote = ray.remote(analyze_remote).options(
            num_cpus=settings.ray_cpus, memory=int(settings.ray_memory_gib * 2**30), max_retries=MAX_RETRIES)
        payload = {"jobs": max(1, int(settings.ray_cpus))}
        tasks = {}
        for p in pending:
            ref = remote.remote({**payload, "targets": p.targets, "source": p.model.source, "kwargs": p.kwargs})
            tasks[ref] = p
        waiting = list(tasks)
        while waiting:
            if cancel.is_set():
                for ref in waiting:
                    ray.cancel(ref, force=True)
                return
            done, waiting = ray.wait(waiting, num_returns=1, timeout=1.0)
            for ref in done:
                finish(_outcome(ray, ref, tasks[ref], settings.out_dir))
    except BaseException:
        cancel.set()
        raise
    finally:
        if started_here:
            ray.shutdown()


def _outcome(ray, ref, planned, out_dir: str):
    from .batch import ModelOutcome
    try:
        result = ray.get(ref)
    except Exception as e:  # noqa: BLE001 — a task Ray could not finish (node lost, worker killed, cancelled)
        text = str(e).strip().splitlines()
        return ModelOutcome(planned, error=f"the Ray task failed: {type(e).__name__}"
                                           f"{': ' + text[-1][:240] if text else ''}")
    if result.get("error"):
        return ModelOutcome(planned, error=result["error"], seconds=result.get("seconds", 0.0),
                            node=result.get("node"))
    _write_files(result["files"], os.path.join(out_dir, RUNS_DIR, planned.folder))
    return ModelOutcome(planned, report=result["report"], seconds=result.get("seconds", 0.0),
                        node=result.get("node"))


def _write_files(files: dict[str, bytes], run_dir: str) -> None:
    """The task's run folder, written where the local backend would have written it."""
    shutil.rmtree(run_dir, ignore_errors=True)
    for rel, data in files.items():
        path = os.path.normpath(os.path.join(run_dir, rel))
        if not path.startswith(run_dir + os.sep):       # only ever names inside the folder the task walked
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_bytes_atomic(path, data)


def analyze_remote(payload: dict) -> dict:
    """Runs in a Ray worker: one model's analysis in a scratch folder, handed back as data (never raises for what
    the model does)."""
    from ..paths import scratch_dir
    from ..targets import worker_modules
    from ..worker import preload_only
    from .batch import Planned, analyze_model
    from .manifest import FleetModel
    preload_only(worker_modules(payload["targets"]))     # only before this worker's first analysis starts its pool
    node = _node_address()
    source = payload["source"]
    if not source.startswith("sample:") and not os.path.isfile(source):
        return {"error": f"{os.path.basename(source)}: not readable on the Ray node {node} (sources are read by "
                         "path on the node that runs them: a folder every node mounts at the same path)",
                "node": node}
    scratch = scratch_dir("ray")
    run_dir = os.path.join(scratch, "run")
    try:
        planned = Planned(0, FleetModel(name="", source=source), folder="run", kwargs=payload["kwargs"])
        started = time.monotonic()
        outcome = analyze_model(planned, payload["targets"], run_dir, payload["jobs"])
        seconds = time.monotonic() - started
        if outcome.report is None:
            return {"error": outcome.error, "seconds": seconds, "node": node}
        files = {}
        for folder, dirs, names in os.walk(run_dir):
            dirs[:] = [d for d in dirs if not (folder == run_dir and d == "work")]
            for name in names:
                path = os.path.join(folder, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        files[os.path.relpath(path, run_dir)] = f.read()
        return {"report": outcome.report, "files": files, "seconds": seconds, "node": node}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _node_address() -> str:
    try:
        import ray
        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 — only a label
        import socket
        return socket.gethostname()


def check_reachable(address: str) -> None:
    """Ray retries an address where nothing listens for minutes: a plain TCP connect says so in seconds."""
    import socket
    if address == "auto":           # Ray finds the cluster this machine runs
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=10).close()
    except ValueError:
        raise XcInputError(f"--ray-address {address}: expected HOST:PORT (the head node's GCS port, 6379 unless "
                           "`ray start --head --port` said otherwise) or auto") from None
    except OSError as e:
        raise XcInputError(f"--ray-address {address}: no Ray cluster answers there ({e.strerror or e}) — start one "
                           "with `ray start --head`, or leave --ray-address out to start one for this batch") from None


def _import_ray():
    try:
        import ray
    except ImportError:
        raise XcInputError("--backend ray: Ray is not installed here (pip install -r requirements.txt installs "
                           "it); or use --backend local") from None
    return ray


def _connect(ray, settings) -> bool:
    """Join the cluster at settings.ray_address, or start one here; True when this call started it."""
    import logging
    if ray.is_initialized():
        return False
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # The workers import xc from the folder this driver imports it from (an unpacked checkout works as well as
    # an install), and Ray's own log lines stay in its log folder, not in the batch's progress.
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p)}}
    common = {"runtime_env": runtime_env, "log_to_driver": False, "logging_level": logging.ERROR,
              "configure_logging": True}
    try:
        if settings.ray_address:
            check_reachable(settings.ray_address)
            ray.init(address=settings.ray_address, **common)
            return True
        from ..api import default_jobs
        ray.init(num_cpus=settings.jobs or default_jobs(), include_dashboard=False, **common)
        return True
    except XcInputError:
        raise
    except Exception as e:  # noqa: BLE001 — Ray's own failure to start or join, worded as one line
        raise XcInputError(f"Ray could not start or join a cluster ({type(e).__name__}: {str(e)[:200]})") from None
