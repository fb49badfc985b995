"""The "Cost on this host" table (Overview, Markdown and HTML reports, `xc analyze`): per target, the peak resident
memory of its run, its compiled artifact's size (and weights), compile, load and first / steady inference time —
each a figure of the Linux CPU xc ran on (the report's `cost` blocks, analysis/cost.py), never the device's. A
figure the host could not give shows "—" and the row says why once."""
from __future__ import annotations

from collections.abc import Mapping

from ..analysis.cost import runtime_memory_bytes
from ..report.types import Report
from .typed_report import as_report

COST_CAVEAT = ("Figures of this host's CPU under Linux, measured in the process that ran each target — not the "
               "phone's, NPU's or GPU's. Memory is the process's peak resident size during the run (the runtime, "
               "its model and everything the process had loaded: compare targets by it, do not read it as the "
               "device's footprint); size is the compiled artifact on disk.")

COLUMNS = ("target", "peak memory MB", "size KB (weights)", "compile s", "load ms", "first inference ms",
           "steady inference ms", "evidence", "not measured")


def _num(value, scale: float = 1.0, digits: int = 2) -> str:
    if not isinstance(value, (int, float)):
        return "—"
    return f"{value * scale:,.{digits}f}"


def _kb(n) -> str:
    return f"{n / 1024:,.1f}" if isinstance(n, int) else "—"


def _why_missing(cost) -> str:
    """Each distinct reason once, with the figures it covers: a target that did not run says so in one phrase."""
    by_reason: dict[str, list[str]] = {}
    for figure, why in (cost.not_measured or {}).items():
        by_reason.setdefault(str(why), []).append(str(figure))
    return "; ".join(f"{', '.join(figures)}: {why}" for why, figures in by_reason.items())


def cost_rows(report: Report | Mapping) -> list[dict]:
    """One row per target that has a cost block, in the report's order (see COLUMNS)."""
    rows = []
    for tid, t in as_report(report).targets.items():
        c = t.cost
        if not c:
            continue
        size = _kb(c.artifact_bytes)
        if isinstance(c.weights_bytes, int):
            size += f" ({_kb(c.weights_bytes)})"
        peak = _num(c.peak_rss_mb, digits=1)
        if isinstance(c.run_rss_growth_mb, (int, float)):
            peak += f" (+{c.run_rss_growth_mb:,.1f})"
        steady = _num(c.steady_inference_ms, digits=3)
        if c.steady_runs:
            steady += f" ×{c.steady_runs}"
        rows.append({"target": tid, "peak memory MB": peak, "size KB (weights)": size,
                     "compile s": _num(c.compile_s), "load ms": _num(c.load_s, 1000, 3),
                     "first inference ms": _num(c.first_inference_s, 1000, 3), "steady inference ms": steady,
                     "evidence": c.evidence or "measured", "not measured": _why_missing(c)})
    return rows


def runtime_memory_rows(report: Report | Mapping) -> list[dict]:
    """The runtimes' and compilers' own memory figures (ExecuTorch's memory plan, Vela's SRAM / flash), each with
    who reported it and its evidence."""
    rows = []
    for tid, t in as_report(report).targets.items():
        for m in (t.cost.runtime_memory if t.cost else ()):
            rows.append({"target": tid, "figure": m.name, "KB": _kb(m.bytes), "what": m.what, "by": m.by,
                         "evidence": m.evidence or "reported"})
    return rows


def cost_host(report: Report | Mapping) -> str:
    """The host the cost figures come from (the first target's; every target of a run ran on it)."""
    for t in as_report(report).targets.values():
        if t.cost and t.cost.host:
            return t.cost.host
    return ""


def cost_line(t) -> str:
    """One line for `xc analyze`: peak memory, size, compile, load, first and steady inference of one target."""
    c = t.cost
    if not c:
        return ""
    parts = []
    if isinstance(c.peak_rss_mb, (int, float)):
        parts.append(f"peak {c.peak_rss_mb:,.0f} MB")
    if isinstance(c.artifact_bytes, int):
        parts.append(f"{_kb(c.artifact_bytes)} KB on disk")
    if isinstance(c.compile_s, (int, float)):
        parts.append(f"compile {c.compile_s:.2f} s")
    if isinstance(c.load_s, (int, float)):
        parts.append(f"load {c.load_s * 1000:,.1f} ms")
    if isinstance(c.first_inference_s, (int, float)):
        parts.append(f"first {c.first_inference_s * 1000:,.2f} ms")
    if isinstance(c.steady_inference_ms, (int, float)):
        parts.append(f"steady {c.steady_inference_ms:,.3f} ms (median of {c.steady_runs})")
    planned = runtime_memory_bytes(c.to_dict() if hasattr(c, "to_dict") else c)
    if planned is not None:
        parts.append(f"planned memory {_kb(planned)} KB")
    if "peak_rss_mb" in (c.not_measured or {}) and not isinstance(c.peak_rss_mb, (int, float)):
        parts.append("not run here")
    elif "steady_inference_ms" in (c.not_measured or {}):
        parts.append("no steady runs")
    return " · ".join(parts)


def cost_text(report: Report | Mapping) -> str:
    """`xc analyze`'s lines: a heading naming the host, then one line per target with a cost block ("" when none
    has one: a report from an older xc)."""
    typed = as_report(report)
    lines = [f"  {tid:<22} {cost_line(t) or '—'}" for tid, t in typed.targets.items() if t.cost]
    if not lines:
        return ""
    return (f"\ncost on this host ({cost_host(typed)}; Linux CPU figures, not the device's):\n"
            + "\n".join(lines) + "\n")
