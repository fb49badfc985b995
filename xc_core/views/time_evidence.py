"""How a target's time per node was obtained, in a reader's words: measured by a profiler on this host, or
estimated by a vendor compiler's performance model (Arm's Vela for the Ethos-U targets; evidence
`estimated-compiler`). Every view that shows a node time labels it from here, so an estimate never reads as a
measurement — and never ranks or sums beside one: a target has one kind or the other (its `node_times.evidence`).

Also Vela's own network summary of an Ethos-U target (info["vela"]) as rows, for the reports."""
from __future__ import annotations

from collections.abc import Mapping

from .. import evidence as ev
from ..report.types import NodeTimes, Report, TargetBlock
from .typed_report import as_report


def is_estimated(node_times: NodeTimes | Mapping | None) -> bool:
    """True when the block's times are a compiler's estimate, not a measurement."""
    kind = node_times.get("evidence") if isinstance(node_times, Mapping) else getattr(node_times, "evidence", None)
    return kind == ev.ESTIMATED_COMPILER


def time_word(node_times: NodeTimes | Mapping | None) -> str:
    """"estimated" or "measured": the adjective a label puts before a time."""
    return "estimated" if is_estimated(node_times) else "measured"


def time_source(node_times: NodeTimes) -> str:
    """Where the times come from, one phrase: "estimated-compiler: Ethos-U55 (…) as Vela 5.2.0 models it (the
    compiler's estimate, no runs)" or "measured on <CPU>, median of 5 profiled runs"."""
    if is_estimated(node_times):
        return f"{ev.ESTIMATED_COMPILER}: {node_times.host_cpu} (the compiler's estimate, no runs)"
    return f"{node_times.evidence or ev.MEASURED} on {node_times.host_cpu}, median of {node_times.runs} profiled runs"


def time_phrase(node_times: NodeTimes) -> str:
    """The short form for a legend beside the target's id: "measured on <CPU>", or "estimated-compiler: Ethos-U55
    (…) as Vela 5.2.0 models it"."""
    if is_estimated(node_times):
        return f"{ev.ESTIMATED_COMPILER}: {node_times.host_cpu}"
    return f"{node_times.evidence or ev.MEASURED} on {node_times.host_cpu}"


def timed_label(tid: str, node_times: NodeTimes) -> str:
    """A timed target's id as a list of timed targets shows it: an estimate marked, a measurement bare."""
    return f"{tid} ({ev.ESTIMATED_COMPILER})" if is_estimated(node_times) else tid


def timed_targets_by_kind(report: Report | Mapping) -> tuple[list[str], list[str]]:
    """The targets that timed their nodes, split: (measured, estimated). They are listed, ranked and summed apart."""
    measured, estimated = [], []
    for tid, t in as_report(report).targets.items():
        if t.node_times.timed_us:
            (estimated if is_estimated(t.node_times) else measured).append(tid)
    return measured, estimated


# ---- Vela's network summary ---------------------------------------------------------------------------------------
def vela_rows(report: Report | Mapping) -> list[dict]:
    """Per Ethos-U target and delegate, Vela's summary of the network it compiled: the accelerator and memory
    configuration, SRAM and flash used, cycles, MACs, the estimated time and the operators it put on the NPU and
    left on the CPU — all Vela's performance model (evidence estimated-compiler), nothing ran."""
    rows = []
    for tid, t in as_report(report).targets.items():
        rows += target_vela_rows(tid, t)
    return rows


def target_vela_rows(tid: str, t: TargetBlock) -> list[dict]:
    vela = t.info.extra.get("vela") if t.info else None
    if not isinstance(vela, Mapping):
        return []
    rows = []
    for name, d in (vela.get("delegates") or {}).items():
        if not isinstance(d, Mapping):
            continue
        flash = (d.get("off_chip_flash_used_kib") or 0) + (d.get("on_chip_flash_used_kib") or 0)
        seconds = d.get("inference_time_s")
        rows.append({"target": tid, "delegate": name,
                     "configuration": " · ".join(str(d[k]) for k in ("accelerator_configuration", "system_config",
                                                                      "memory_mode") if d.get(k)) or "—",
                     "SRAM used KiB": _kib(d.get("sram_used_kib")),
                     "flash used KiB": _kib(flash if any(k in d for k in ("off_chip_flash_used_kib",
                                                                          "on_chip_flash_used_kib")) else None),
                     "cycles": f"{d['cycles_total']:,}" if isinstance(d.get("cycles_total"), int) else "—",
                     "MACs": f"{d['macs']:,}" if isinstance(d.get("macs"), int) else "—",
                     "estimated µs": f"{seconds * 1e6:,.1f}" if isinstance(seconds, (int, float)) else "—",
                     "operators NPU / CPU": f"{d.get('npu_operators', '—')} / {d.get('cpu_operators', '—')}",
                     "evidence": vela.get("evidence") or ev.ESTIMATED_COMPILER})
    return rows


def _kib(value) -> str:
    return f"{value:,.1f}" if isinstance(value, (int, float)) else "—"
