"""What running a target costs on this host, measured in the process that runs it (`TargetResult.cost`, a dict the
report's `cost` block is made from by analysis/cost.py): the resident-memory peak of the compile and run phases, the
compile, load, first and steady inference times, the compiled artifact's size on disk and its weights, and the
runtime's own memory figures where it has any.

Memory: the kernel keeps each process's peak resident size (VmHWM in /proc/self/status), and resetting it before a
phase (peak_memory.py; a confined worker keeps the file open from before its confinement) makes a phase's peak
exact, spikes included. Where the reset is refused, a thread samples VmRSS every SAMPLE_EVERY_S instead.
Either way it is this process only: a child process the toolchain starts (Vela, the C++ compiler Inductor calls,
Chromium for litert-gpu) is left out.

Times: the steady runs use the target's own run path (`Target._cost_runner`), up to STEADY_RUNS runs or
STEADY_BUDGET_S seconds, whichever comes first; none when the run asks for no timed runs (--profile-runs 0, as
culprit search does). A target whose profiled runs time the same call on the same compiled model
(`profiled_runs_are_steady`) lends their whole-run times instead of running again.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any, Callable

from .. import evidence as ev
from ..peak_memory import reset_peak, status_bytes
from .base import OK, Target, TargetResult, cpu_wait_share, cpu_wait_snapshot, host_cpu, profile_runs

STEADY_RUNS = 5
STEADY_BUDGET_S = 5.0
SAMPLE_EVERY_S = 0.002
_MB = 1024 * 1024

LEFT_OUT = ("child processes the toolchain starts (Vela, the C++ compiler Inductor calls, Chromium for litert-gpu) "
            "are left out")


def resident_bytes() -> int | None:
    """This process's resident size now (VmRSS; psutil's memory_info().rss reads the same figure)."""
    return status_bytes("VmRSS")


class _Sampler:
    """VmRSS read every SAMPLE_EVERY_S by a daemon thread; `stop()` returns the highest seen."""

    def __init__(self, start: int):
        self.peak = start
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="xc-rss-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._done.wait(SAMPLE_EVERY_S):
            rss = resident_bytes()
            if rss is not None and rss > self.peak:
                self.peak = rss

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        rss = resident_bytes()
        return max(self.peak, rss or 0)


class PhaseMemory:
    """The resident-memory peak of each phase of one target's run in this process, and the resident size before
    it. `start(phase)` / `stop(phase)` around a phase; the method (kernel peak or sampling) is chosen at the first
    start and said in `method`."""

    def __init__(self):
        self.phases: dict[str, dict[str, int]] = {}
        self.method: str | None = None
        self._refused: str | None = None
        self._open: dict[str, Any] = {}

    def start(self, phase: str) -> None:
        before = resident_bytes()
        if before is None:
            self.method = "none"
            return
        if not self._refused:       # once refused, sampled from then on: one method per target
            self._refused = reset_peak() or ""
        if not self._refused:
            self.method = "vmhwm"
            self._open[phase] = (before, None)
        else:
            self.method = "sampled"
            self._open[phase] = (before, _Sampler(before))

    def stop(self, phase: str) -> None:
        if phase not in self._open:
            return
        before, sampler = self._open.pop(phase)
        peak = sampler.stop() if sampler is not None else status_bytes("VmHWM")
        if peak is not None:
            self.phases[phase] = {"before": before, "peak": max(peak, before)}

    def describe(self) -> str:
        """How the peaks were measured and what they leave out, in one sentence."""
        if self.method == "vmhwm":
            how = ("the kernel's peak resident size of the process that ran the target (VmHWM, reset before each "
                   "phase through /proc/self/clear_refs)")
        elif self.method == "sampled":
            how = (f"the resident size of the process that ran the target (VmRSS) sampled every "
                   f"{SAMPLE_EVERY_S * 1000:g} ms by a thread — the kernel's peak could not be reset here "
                   f"({self._refused}); a spike shorter than that is missed")
        else:
            return "not measured: this host's /proc does not give a process's resident size"
        return f"{how}; {LEFT_OUT}"


def _mb(n: int | None) -> float | None:
    return None if n is None else round(n / _MB, 2)


def host_description() -> str:
    """The CPU and OS the figures come from: a Linux CPU, not the device the target is for."""
    import platform
    return f"{host_cpu()}, {platform.system()} {platform.release()}"


# --------------------------------------------------------------------------------------------- the cost dict ----
def measure_cost(target: Target, compiled, inputs: dict, captured, result: TargetResult,
                 memory: PhaseMemory) -> None:
    """`result.cost` for a target that compiled: sizes, the phases' memory, and — where the runtime ran here and
    measured its numbers — load, first and steady inference times and the runtime's own memory figures. Never
    raises: a figure that could not be had says why in `not_measured`."""
    cost: dict[str, Any] = {"evidence": ev.MEASURED, "host": host_description(), "memory_method": memory.describe(),
                            "not_measured": {}, "notes": []}
    result.cost = cost
    try:
        _measure(target, compiled, inputs, captured, result, memory, cost)
    except Exception as e:  # noqa: BLE001 — the figures had so far stay; the rest say why they are missing
        cost["notes"].append(f"xc could not finish measuring the cost: {type(e).__name__}: {str(e)[:300]}")


def _measure(target: Target, compiled, inputs: dict, captured, result: TargetResult, memory: PhaseMemory,
             cost: dict) -> None:
    missing = cost["not_measured"]
    cost["compile_s"] = result.timings.get("compile")
    compile_mem = memory.phases.get("compile")
    cost["compile_peak_rss_mb"] = _mb(compile_mem["peak"]) if compile_mem else None
    _sizes(target, compiled, result, cost)
    try:
        cost["runtime_memory"] = list(target._runtime_memory(compiled, result)) if compiled is not None else []
    except Exception as e:  # noqa: BLE001 — a figure the runtime could not give is a note, not a failure
        cost["runtime_memory"] = []
        missing["runtime_memory"] = f"could not be read: {type(e).__name__}: {str(e)[:200]}"
    if not cost["runtime_memory"] and "runtime_memory" not in missing:
        missing["runtime_memory"] = target.runtime_memory_absent
    why_not = not_run_here(result)
    if why_not:
        for key in ("peak_rss_mb", "first_inference_s", "steady_inference_ms", "load_s"):
            missing[key] = why_not
    else:
        run_mem = memory.phases.get("run")
        if run_mem:
            cost["peak_rss_mb"] = _mb(run_mem["peak"])
            cost["run_rss_growth_mb"] = _mb(run_mem["peak"] - run_mem["before"])
        else:
            missing["peak_rss_mb"] = memory.describe()
        _times(target, compiled, inputs, captured, result, cost)


def not_run_here(result: TargetResult) -> str | None:
    """Why this target's run phase is not the runtime running on this host (None when it is)."""
    if result.status != OK:
        return f"the {result.error_stage or 'run'} phase failed: no run to measure"
    if result.numerics_not_run:
        return result.numerics_not_run
    numerics = result.evidence.get("numerics")
    if numerics != ev.MEASURED:
        return (f"this host does not run this runtime: its outputs are {numerics or 'not computed'}, so the run "
                "phase's time and memory would be xc's emulation's, not the runtime's")
    if not result.outputs:
        return "the run gave no outputs"
    return None


def _times(target: Target, compiled, inputs, captured, result: TargetResult, cost: dict) -> None:
    missing = cost["not_measured"]
    try:
        runner = target._cost_runner(compiled, inputs, captured)
    except Exception as e:  # noqa: BLE001
        runner, why = None, f"xc could not set up timed runs: {type(e).__name__}: {str(e)[:200]}"
    else:
        why = f"{target.id} gives xc no run path to time apart from the analysis run"
    if runner is None:
        for key in ("first_inference_s", "steady_inference_ms", "load_s"):
            missing[key] = why
        return
    asked = profile_runs(target)
    if runner.load is None:
        missing["load_s"] = runner.load_what
        cost["first_inference_s"] = result.timings.get("run")
        cost["notes"].append("first inference: the analysis run, the first on the compiled model (the runtime's "
                             "lazy set-up included)")
        run = runner.run
    elif asked <= 0:
        missing["load_s"] = missing["first_inference_s"] = "this run asked for no timed runs (--profile-runs 0)"
        run = None
    else:
        try:
            t0 = time.perf_counter()
            run = runner.load()
            cost["load_s"] = round(time.perf_counter() - t0, 4)
            t0 = time.perf_counter()
            run()
            cost["first_inference_s"] = round(time.perf_counter() - t0, 4)
            cost["notes"].append(f"load: {runner.load_what}; first inference: the first run after that load")
        except Exception as e:  # noqa: BLE001
            why = f"loading the artifact again failed: {type(e).__name__}: {str(e)[:200]}"
            missing["load_s"] = missing["first_inference_s"] = missing["steady_inference_ms"] = why
            return
    samples_ms, waited = _profiled_run_ms(target, result), None
    if samples_ms:
        waited = (result.node_times or {}).get("cpu_wait_share")
        cost["notes"].append("steady inference: the profiled runs' whole-run times (the same call on the same "
                             "compiled model and configuration)")
    elif asked <= 0:
        missing["steady_inference_ms"] = "this run asked for no timed runs (--profile-runs 0)"
        return
    else:
        before = cpu_wait_snapshot()
        samples_ms = steady_runs(run)
        waited = cpu_wait_share(before)
        if not samples_ms:
            missing["steady_inference_ms"] = (f"the first inference took longer than the {STEADY_BUDGET_S:g} s "
                                              "budget for steady runs")
            return
    from ..analysis.node_time import HOST_BUSY_SHARE, spread
    if waited is not None and waited >= HOST_BUSY_SHARE:
        # A busy host inflates times far past their spread (OpenMP kernels spin against other processes): say so
        # beside the figure rather than let it read as the runtime's.
        cost["notes"].append(f"the host was busy during the steady runs ({waited:.0%} of runnable time spent waiting "
                             "for a CPU): these times are inflated; compare targets timed side by side in one run")
    cost["steady_inference_ms"] = round(statistics.median(samples_ms), 4)
    cost["steady_runs"] = len(samples_ms)
    cost["steady_spread_ms"] = spread(samples_ms) or {}


def _profiled_run_ms(target: Target, result: TargetResult) -> list[float] | None:
    if not target.profiled_runs_are_steady or not result.node_times:
        return None
    runs = (result.node_times.get("samples_us") or {}).get("run")
    return [round(us / 1000, 4) for us in runs] if runs else None


def steady_runs(run: Callable[[], Any], runs: int = STEADY_RUNS, budget_s: float = STEADY_BUDGET_S) -> list[float]:
    """Milliseconds of up to `runs` calls of `run`, stopping before a call that would take the total past
    `budget_s` (judged by the slowest so far: a 3 s model gets one steady run, a 10 s one none)."""
    out: list[float] = []
    spent, slowest = 0.0, 0.0
    probe = time.perf_counter()
    run()                      # one warm-up: the first call after the analysis run may still differ
    slowest = time.perf_counter() - probe
    spent += slowest
    while len(out) < runs and spent + slowest <= budget_s:
        t0 = time.perf_counter()
        run()
        took = time.perf_counter() - t0
        out.append(round(took * 1000, 4))
        spent, slowest = spent + took, max(slowest, took)
    return out


# ------------------------------------------------------------------------------------------- size on disk ----
def _sizes(target: Target, compiled, result: TargetResult, cost: dict) -> None:
    missing = cost["not_measured"]
    paths, why = target._artifact_paths(compiled, result) if compiled is not None else ([], "nothing compiled")
    files = []
    for path in paths:
        for f in _files_under(path):
            files.append({"path": os.path.relpath(f, os.path.dirname(path)), "bytes": os.path.getsize(f)})
    if not files:
        missing["artifact_bytes"] = missing["weights_bytes"] = why or "the target wrote no compiled artifact"
        return
    cost["artifact_files"] = files
    cost["artifact_bytes"] = sum(f["bytes"] for f in files)
    weights, how = None, []
    for path in paths:
        try:
            w = weights_in(path)
        except Exception as e:  # noqa: BLE001 — an artifact xc cannot parse: its weights are not given
            missing["weights_bytes"] = f"{os.path.basename(path)}: {type(e).__name__}: {str(e)[:200]}"
            return
        if w is not None:
            weights = (weights or 0) + w[0]
            how.append(w[1])
    if weights is None:
        missing["weights_bytes"] = ("xc does not read the weights out of this artifact's format, or they are inside "
                                    "a delegate's own payload (a Core ML model, Vela's command stream)")
    else:
        cost["weights_bytes"] = weights
        cost["notes"].append("weights: " + "; ".join(how))


def _files_under(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names)
    return [path] if os.path.isfile(path) else []


def weights_in(path: str) -> tuple[int, str] | None:
    """(bytes of weights in the artifact at `path`, how they were counted), or None for a format xc does not read."""
    name = path.lower()
    if name.endswith(".onnx"):
        return onnx_weights(path), "the ONNX initializers' data (external data included)"
    if name.endswith(".tflite"):
        return tflite_weights(path), "the .tflite's constant buffers"
    if name.endswith(".pte"):
        weights = pte_weights(path)
        # A delegate that keeps its weights inside its own payload (Core ML's model, Vela's command stream) shows
        # none here: no figure rather than a 0.
        return (weights, "the .pte's constant buffers and named data (delegates' weights)") if weights else None
    if name.endswith(".bin") and os.path.exists(path[:-4] + ".xml"):
        return os.path.getsize(path), "the OpenVINO IR's .bin"
    if name.endswith(".mlpackage") and os.path.isdir(path):
        found = [f for f in _files_under(path) if os.path.basename(f) == "weight.bin"]
        return (sum(os.path.getsize(f) for f in found), "the .mlpackage's weight.bin") if found else None
    return None


def onnx_weights(path: str) -> int:
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path, load_external_data=False)
    total = 0
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            entries = {e.key: e.value for e in t.external_data}
            if "length" in entries:
                total += int(entries["length"])
            else:
                location = os.path.join(os.path.dirname(path), entries.get("location", ""))
                total += os.path.getsize(location) - int(entries.get("offset", 0))
        elif t.raw_data:
            total += len(t.raw_data)
        else:
            total += numpy_helper.to_array(t).nbytes
    return total


def tflite_weights(path: str) -> int:
    from ai_edge_litert import schema_py_generated as schema
    with open(path, "rb") as f:
        data = f.read()
    model = schema.Model.GetRootAs(data, 0)
    total = 0
    for i in range(model.BuffersLength()):
        buf = model.Buffers(i)
        total += buf.Size() if buf.Offset() > 1 else buf.DataLength()      # >2 GB models keep data past the end
    return total


def pte_weights(path: str) -> int:
    """The .pte's constants and named data; 0 when a delegate that keeps its weights inside its own payload (Core
    ML's model, Vela's command stream) holds the model — its few stray scalars are not the weights."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    with open(path, "rb") as f:
        pte = deserialize_pte_binary(f.read())
    named = sum(len(b) for b in pte.named_data.buffers) if pte.named_data is not None else 0
    constants = sum(len(b.storage) for b in pte.program.constant_buffer)
    delegates = {d.id for plan in pte.program.execution_plan for d in plan.delegates}
    if delegates - {"XnnpackBackend", "VulkanBackend"} and not named:
        return 0
    return constants + named
