"""A target's `cost` block (report/types.py `Cost`): what running it cost on the host xc ran on — memory, size on
disk, compile, load and inference time — from the figures targets/run_cost.py measured in the process that ran it.

The figures are this host's (a Linux CPU), never the device's: `host` names it and `evidence` is `measured`; a
runtime's own memory figures keep their own evidence. A figure this host could not give is absent, and
`not_measured` says why — nothing is filled in.
"""
from __future__ import annotations

from .. import evidence as ev

# The Cost fields a measured cost dict may hold (anything else in it is not the report's).
_FIELDS = ("compile_s", "load_s", "first_inference_s", "steady_inference_ms", "steady_runs", "steady_spread_ms",
           "peak_rss_mb", "run_rss_growth_mb", "compile_peak_rss_mb", "memory_method", "artifact_bytes",
           "artifact_files", "weights_bytes", "runtime_memory", "not_measured", "notes")
_RUNTIME_MEMORY = ("name", "bytes", "what", "by", "evidence")


def cost_block(result) -> dict | None:
    """The report's `cost` block of a TargetResult, or None when nothing was measured (a target that never
    compiled: unavailable, or one whose compile failed)."""
    cost = result.cost
    if not cost:
        return None
    block = {"evidence": cost.get("evidence") or ev.MEASURED, "host": cost.get("host") or ""}
    for key in _FIELDS:
        if cost.get(key) is not None:
            block[key] = cost[key]
    block["runtime_memory"] = [{k: m.get(k) for k in _RUNTIME_MEMORY if k in m}
                               for m in cost.get("runtime_memory") or []]
    block["not_measured"] = {str(k): str(v) for k, v in (cost.get("not_measured") or {}).items()}
    block["notes"] = [str(n) for n in cost.get("notes") or []]
    return block


def runtime_memory_bytes(block: dict | None) -> int | None:
    """The sum of the runtime's own memory figures that are memory-planned buffers (ExecuTorch's plan), the figure
    a table shows beside the measured peak; None where the runtime gave none."""
    figures = [m.get("bytes") for m in (block or {}).get("runtime_memory") or []
               if m.get("bytes") is not None and str(m.get("name", "")).startswith("memory-planned")]
    return sum(figures) if figures else None
