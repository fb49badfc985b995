"""Running one target: `execute_target` compiles, inspects and runs it, validates and times what it gives back, and
turns every failure into a value in the result. It takes and returns plain data, so a worker process runs it the
same way as this one.

It lives beside the protocol (base.py), not in it: it decides whether a target goes through an ONNX source's
route (routed.py), and routed.py builds on the protocol — kept in base.py, that decision made the two import
each other.
"""
from __future__ import annotations

import time
import traceback
from typing import Callable

from ..errors import first_line, summarize_error, with_kind
from ..outputs import normalize_outputs
from .base import (ERROR, MAX_ERROR_DETAIL, UNAVAILABLE, Target, TargetResult, attach_node_times, check_result,
                   cpu_wait_share, cpu_wait_snapshot, profile_runs)
from .routed import through_route
from .run_cost import PhaseMemory, measure_cost


def goes_through_route(target: Target, captured) -> bool:
    """A target that compiles PyTorch programs, given an ONNX source, compiles the program xc's ONNX → PyTorch route
    made for the run — unless `captured` is already the route's view of it."""
    return target.takes_program and captured.source.kind == "onnx" and not captured.routed


# Exception types that say nothing beyond "it failed" (ORT raises `Fail`, OpenVINO and xc `RuntimeError`): the
# message is the finding. Any other type (KeyError, InvalidArgument, MemoryError …) stays in front of it.
_GENERIC_EXCEPTIONS = {"RuntimeError", "TargetError", "Exception", "Fail", "RuntimeException"}


def _error_words(e: BaseException) -> str:
    return with_kind(e, summarize_error(str(e)), _GENERIC_EXCEPTIONS)


def execute_target(target: Target, captured, inputs: dict, workdir: str,
                   log: Callable[[str], None] | None = None, probes: list[str] | None = None,
                   on_phase: Callable[[str], None] | None = None, dataset: dict | None = None) -> TargetResult:
    """Compile, inspect and run one target; every failure becomes a value in the result. `on_phase` hears each
    phase as it starts (a worker passes it on, so a kill can say which phase it interrupted). `dataset` (input
    name -> samples stacked on a leading axis, --data) is run sample by sample after the outputs are checked."""
    on_phase = on_phase or (lambda s: None)
    if goes_through_route(target, captured):
        return through_route(target, captured, inputs, workdir, execute_target, log=log, probes=probes,
                             on_phase=on_phase, dataset=dataset)
    result = TargetResult(target=target.identity, evidence=dict(target.evidence))
    ok, why = target.available()
    if not ok:
        result.status, result.error = UNAVAILABLE, why
        return result
    if target.needs_onnx and captured.onnx_error:
        # The target was asked for and could have run: the export that feeds it failed. An error, not "cannot
        # take this kind of source".
        result.status, result.error_stage = ERROR, "capture"
        result.error = f"no ONNX to compile: {captured.onnx_error}"
        return result
    ok, why = target.accepts(captured)
    if not ok:
        result.status, result.error = UNAVAILABLE, why
        return result
    skip = target.too_big(captured)
    if skip:
        result.status, result.error = UNAVAILABLE, skip["why"]
        result.info["skipped_above_size"] = skip
        return result
    compiled = None
    target.calibration_inputs = inputs
    memory = PhaseMemory()      # the resident-memory peak of the compile and run phases (cost block)
    for phase in ("compile", "inspect", "run"):
        t0 = time.perf_counter()
        on_phase(phase)
        failed = False
        if phase != "inspect":
            memory.start(phase)
        try:
            if phase == "compile":
                compiled = target._compile(captured, workdir, result)
            elif phase == "inspect":
                result.graph = target._inspect(compiled, captured, result)
            else:
                raw = target._run(compiled, inputs, captured, result)
                result.outputs, skipped, matching = normalize_outputs(raw, list(captured.output_names or []))
                if skipped:
                    result.info["outputs_not_compared"] = skipped
                if matching["matched_by"] != "name" or matching["converted"]:
                    result.info["output_matching"] = matching
        except Exception as e:  # noqa: BLE001 — any compiler failure is a finding, not a crash
            result.status, result.error_stage = ERROR, phase      # the report's key: the phase it failed in
            result.error = f"{phase} failed: {_error_words(e)}"
            result.error_detail = str(e).strip()[:MAX_ERROR_DETAIL] or None
            result.traceback = traceback.format_exc(limit=6)
            if log:
                log(f"{target.identity}: {result.error}")
            failed = True
        finally:
            result.timings[phase] = round(time.perf_counter() - t0, 4)
            memory.stop(phase)
        if failed:
            if compiled is not None:    # what compiled still has a size and a compile cost
                measure_cost(target, compiled, inputs, captured, result, memory)
            # A graph that was read back is still worth showing when only running failed.
            return result
    result.contract = check_result(result, captured)
    if probes and target.intermediates_method:
        on_phase("intermediates")
        t0 = time.perf_counter()
        try:
            result.intermediates = target._intermediates(compiled, inputs, captured, result, probes)
            result.intermediates_method = target.intermediates_method
        except Exception as e:  # noqa: BLE001 — per-layer drift is optional; say why it is missing
            result.notes.append(f"intermediate values unavailable: {type(e).__name__}: {first_line(e, 300)}")
        result.timings["intermediates"] = round(time.perf_counter() - t0, 4)
    runs = profile_runs(target, len(result.graph.nodes) if result.graph is not None else 0)
    if runs and target.profile_method and result.graph is not None:
        on_phase("profile")
        t0 = time.perf_counter()
        try:
            before = cpu_wait_snapshot()
            samples = target._profile(compiled, inputs, captured, result, runs)
            attach_node_times(result, samples, target.profile_method, runs, cpu_wait_share(before))
        except Exception as e:  # noqa: BLE001 — the time per node is optional; say why it is missing
            result.notes.append(f"time per node unavailable: {type(e).__name__}: {first_line(e, 300)}")
        result.timings["profile"] = round(time.perf_counter() - t0, 4)
    # Last, so its timed runs disturb nothing measured before and can reuse the profiled runs' times.
    on_phase("cost")
    t0 = time.perf_counter()
    measure_cost(target, compiled, inputs, captured, result, memory)      # never raises: gaps say why
    result.timings["cost"] = round(time.perf_counter() - t0, 4)
    if dataset:
        # After everything that reads the analysis run: a target may keep state of its last call (Core ML's MIL
        # interpreter records the values per-layer drift reads), and the dataset's samples must not replace it.
        on_phase("dataset")
        t0 = time.perf_counter()
        from .dataset_runs import run_dataset
        run_dataset(target, compiled, captured, result, dataset)     # never raises: a failure is in dataset_run
        result.timings["dataset"] = round(time.perf_counter() - t0, 4)
    return result
