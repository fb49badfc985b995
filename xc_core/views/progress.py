"""An analysis's progress events in words: Markdown lines for the dashboard's progress panel, plain lines for the
CLI's stderr. Both read the same ProgressEvent (xc_core/progress.py)."""
from __future__ import annotations

import os

from ..progress import CAPTURE, INPUTS, LOAD, ONNX, REPORT, ROUTE, TARGET, ProgressEvent
from ..sources.spec import BEFORE_STAGE_WORDS
from .text import markdown_plain

_STEP_WORDS = {LOAD: "Loading the model", INPUTS: "Choosing input shapes",
               CAPTURE: "Capturing the graph (PyTorch: torch.export)",
               ONNX: "Exporting it to ONNX (torch.onnx) for the targets that compile ONNX",
               ROUTE: "Converting the ONNX to a PyTorch program (xc's ONNX → PyTorch route) for the targets that "
                      "compile one"}
_STATUS_BADGE = {"ok": ":green-badge[ok]", "error": ":red-badge[error]", "unavailable": ":gray-badge[unavailable]"}


def progress_lines(events: list[ProgressEvent]) -> tuple[list[str], float]:
    """The analysis so far as Markdown, one line per step or target, and the share of targets finished."""
    lines: dict[str, str] = {}
    fraction = 0.0
    for ev in list(events):
        if ev.step in _STEP_WORDS:
            words = _STEP_WORDS[ev.step]
            lines[ev.step] = f"{words} …" if ev.status == "running" else f":green-badge[done] {words}"
            if ev.status == "error":
                lines[ev.step] = f":red-badge[failed] {words}: {markdown_plain(ev.error or '')}"
            if ev.step == INPUTS and ev.status == "done":
                failed = [p for p in (ev.resolution or {}).get("probes", []) if not p["ok"]]
                if failed:
                    lines[ev.step] += (f" — {len(failed)} size(s) failed on the reference before one ran "
                                       f"({markdown_plain(str(failed[0]['dims']))})")
            if ev.step == CAPTURE and ev.status == "done" and ev.nodes:
                what = BEFORE_STAGE_WORDS.get(ev.graph, "graph")
                lines[ev.step] = (f":green-badge[done] Captured the {what}: {ev.nodes} ops — the Topology page "
                                  "draws it while the targets compile")
        elif ev.step == TARGET:
            if ev.status == "running":
                lines[ev.target] = f"`{ev.target}` {ev.phase or 'starting'} …"
            else:
                lines[ev.target] = f"{_STATUS_BADGE.get(ev.status, '')} `{ev.target}`" + (
                    f": {markdown_plain(ev.error)}" if ev.error else "")
                fraction = min(1.0, (ev.index or 0) / max(1, ev.total or 1))
        elif ev.step == REPORT:
            lines["report"] = ":green-badge[done] Report"
    if fraction >= 1.0 and "report" not in lines:
        lines["report"] = "Comparing the targets and building the report …"
    return list(lines.values()), fraction


def cli_line(ev: ProgressEvent) -> str | None:
    """The CLI's stderr line for an event, or None for the events it does not print."""
    if ev.step == TARGET and ev.status != "running":
        return f"  {ev.target:20} {ev.status}" + (f" — {ev.error}" if ev.error else "")
    if ev.step == CAPTURE and ev.status == "running":
        return "  capturing (torch.export / ONNX)…"
    if ev.step == ONNX and ev.status == "error":
        return f"  no ONNX — {ev.error}; the targets that compile ONNX fail with it"
    if ev.step == ROUTE and ev.status == "error":
        return f"  no PyTorch program from the ONNX — {ev.error}; the targets that compile one fail with it"
    if ev.step == CAPTURE and ev.captured:
        rel = os.path.relpath(ev.captured)
        return (f"  captured {ev.nodes} ops in {ev.seconds:.1f} s "
                f"({ev.captured if rel.startswith('..') else rel}); compiling…")
    return None


def captured_event(events: list[ProgressEvent]) -> ProgressEvent | None:
    """The capture-done event that names the captured graph's file, if capture has finished."""
    for ev in reversed(list(events)):
        if ev.step == CAPTURE and ev.status == "done" and ev.captured:
            return ev
    return None
