"""`xc batch --backend ray`: each model's analysis a Ray task, for when one machine is not enough.

A task asks for `ray_cpus` CPUs (its analysis runs that many worker processes at once) and `ray_memory_gib` of
memory, so Ray places it where both are free; the worker limits (--timeout, --memory) still bound each worker
process inside it. The task analyses into a scratch folder on its node and returns the Report and the run's
files as data; the driver — the `xc batch` process — writes them and records them in its one run store. Sources
are read by path on the node that runs the task: on a cluster of several machines, keep models in a folder every
node mounts at the same path (a `sample:` needs nothing).

With `--ray-address` the batch joins that cluster (and says so when the cluster serves clients without a token);
without, it starts a Ray on this machine for the run and stops it after. That Ray is private to the run: every port
it opens is on 127.0.0.1, and it wants Ray's token authentication with a fresh random token (or $RAY_AUTH_TOKEN).
"""
from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import subprocess
import sys
import time

from ..errors import XcInputError
from ..paths import write_bytes_atomic
from .manifest import FleetModel
from .matrix import RUNS_DIR
from .model_run import ModelOutcome, Planned, analyze_model

# A Ray task that dies (its node lost, its worker process killed) is tried once more, then is that model's error.
MAX_RETRIES = 1

# The only node address for which Ray binds its servers to one interface: for any other (even 127.0.0.2) the GCS,
# the raylet and every worker listen on all interfaces. So a Ray xc starts is on loopback, and a batch across
# machines joins a cluster its owner started and firewalled (--ray-address).
LOOPBACK = "127.0.0.1"
TOKEN_ENV = "RAY_AUTH_TOKEN"


def run_ray(pending, settings, finish, cancel) -> None:
    start_here = not settings.ray_address and not _ray_connected()
    if start_here and "ray" in sys.modules and any(os.environ.get(k) != v for k, v in _READ_ON_IMPORT.items()):
        raise XcInputError("--backend ray: Ray was imported in this process before xc could make the Ray it starts "
                           "private (token authentication, loopback only): run the batch in a process of its own "
                           "(xc batch), or join a cluster with --ray-address")
    with _private_cluster_environment() if start_here else contextlib.nullcontext():
        ray = _import_ray()
        _run_tasks(ray, pending, settings, finish, cancel)


def _run_tasks(ray, pending, settings, finish, cancel) -> None:
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
    """Ray retries an address where nothing listens for minutes: a plain TCP connect says so in seconds. Then the
    cluster's authentication: one that wants a token this process has not got is one line now (Ray would retry for
    20 s), one that serves anybody is one warning."""
    import socket
    if address == "auto":           # Ray finds the cluster this machine runs; _connect checks it once joined
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
    _check_authentication(address)


def _check_authentication(address: str) -> None:
    from ..store import say_once
    wants = _cluster_wants_token(address)
    if wants is False:
        say_once(f"warning: the Ray cluster at {address} serves clients without a token (its token authentication "
                 "is off): anyone who can reach its ports can run code on its nodes — start it with "
                 "RAY_AUTH_MODE=token and a RAY_AUTH_TOKEN, and give xc the same two")
    elif wants and os.environ.get("RAY_AUTH_MODE", "").strip().lower() != "token":
        raise XcInputError(f"--ray-address {address}: that cluster wants Ray's token authentication: set "
                           "RAY_AUTH_MODE=token and its token in RAY_AUTH_TOKEN (or a file named by "
                           "RAY_AUTH_TOKEN_PATH)")


# A client with no token asks the cluster's GCS for one key: Ray's GcsClient raises AuthenticationError at once
# when the cluster checks tokens, and answers when it does not (a driver that has a token joins either kind alike,
# and the cluster reports its mode nowhere). In a child process, so this process's own token stays out of it.
_AUTH_PROBE = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1]).internal_kv_get(b"xc-auth-probe", None, timeout=20)
except AuthenticationError:
    print("token")
else:
    print("open")
"""


@functools.lru_cache(maxsize=None)
def _cluster_wants_token(address: str) -> bool | None:
    """True when the Ray cluster at `address` turns away a client without a token, False when it serves one, None
    when the probe cannot tell (TLS, another Ray, a timeout): then nothing is said."""
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, "RAY_AUTH_TOKEN_PATH")}
    env["RAY_AUTH_MODE"] = "disabled"
    try:
        r = subprocess.run([sys.executable, "-c", _AUTH_PROBE, address], env=env, capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    answer = r.stdout.split()[-1:]
    return {"token": True, "open": False}.get(answer[0]) if answer else None


def _import_ray():
    try:
        import ray
    except ImportError:
        raise XcInputError("--backend ray: Ray is not installed here (pip install -r requirements.txt installs "
                           "it); or use --backend local") from None
    return ray


def _ray_connected() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


# Set in this process while the Ray it starts runs (the Ray processes inherit them), then put back as they were.
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps the node address 127.0.0.1: otherwise Ray swaps a loopback node address
# for this machine's network address, and then its servers listen on every interface. Ray reads both of these when
# it is imported, so they are set before that.
_READ_ON_IMPORT = {"RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
_PRIVATE_ENV = {**_READ_ON_IMPORT, "RAY_USAGE_STATS_ENABLED": "0"}


@contextlib.contextmanager
def _private_cluster_environment():
    """Token authentication for the Ray started here, with a fresh random token unless RAY_AUTH_TOKEN names the
    user's own: in the environment only, which Ray's processes need (the analysis workers a task starts get an
    allow-listed environment without it), never in a report, a log line or a file."""
    saved = {k: os.environ.get(k) for k in (*_PRIVATE_ENV, TOKEN_ENV)}
    os.environ.update(_PRIVATE_ENV)
    if not os.environ.get(TOKEN_ENV):
        os.environ[TOKEN_ENV] = secrets.token_hex(32)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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
            if settings.ray_address == "auto":
                _check_authentication(ray.get_runtime_context().gcs_address)
            return True
        from ..api import default_jobs
        # address="local": a new Ray even when RAY_ADDRESS or a `ray start` cluster on this machine names another.
        # No dashboard; the dashboard agent of Ray's core package opens no port, and no Ray Client server starts.
        ray.init(address="local", num_cpus=settings.jobs or default_jobs(), include_dashboard=False,
                 _node_ip_address=LOOPBACK, **common)
        node = ray.util.get_node_ip_address()
        if node != LOOPBACK:        # what Ray did, not what it was asked: a node elsewhere listens on every interface
            ray.shutdown()
            raise XcInputError(f"the Ray started for this batch took the node address {node}, not {LOOPBACK}, where "
                               "it would listen on every interface; stopped")
        return True
    except XcInputError:
        raise
    except Exception as e:  # noqa: BLE001 — Ray's own failure to start or join, worded as one line
        text = str(e).replace(os.environ[TOKEN_ENV], "<token>") if os.environ.get(TOKEN_ENV) else str(e)
        raise XcInputError(f"Ray could not start or join a cluster ({type(e).__name__}: {text[:200]})") from None
