"""What an analysis says while it runs: one ProgressEvent type, emitted by `api.analyze` (in process or from its
workers) and read by the CLI's stderr lines, the dashboard's progress panel and its captured-graph preview
(`views/progress.py` turns events into lines for both).

Words: an analysis goes through *steps* (load, inputs, capture, onnx or onnx-route, one per target, report); a target's worker
goes through *phases* (load, compile, inspect, run, intermediates, save). A "stage" is only ever one of the six
lowering stages a compiler's passes are mapped onto (xc_core/lowering.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

# The analysis's steps, in order.
LOAD, INPUTS, CAPTURE, ONNX, TARGET, REPORT, REPORT_RETRY = ("load", "inputs", "capture", "onnx", "target",
                                                             "report", "report-retry")
ROUTE = "onnx-route"    # an ONNX source made a PyTorch program, for the targets that compile one
PREPARE_STEPS = (LOAD, INPUTS, CAPTURE, ONNX, ROUTE)
RUNNING, DONE, ERROR = "running", "done", "error"


@dataclass(frozen=True)
class ProgressEvent:
    step: str                       # one of the steps above
    status: str                     # running | done | error; a finished target: its status (ok | error | …)
    target: str | None = None       # TARGET: the target's identity
    phase: str | None = None        # TARGET, running: the worker's phase (compile, inspect, run …)
    index: int | None = None        # TARGET: targets finished so far …
    total: int | None = None        # … of this many
    error: str | None = None        # why a step or a target failed (one line)
    source: str | None = None       # LOAD done: the source's name
    resolution: dict | None = None  # INPUTS done: how the input shapes were picked
    seconds: float | None = None    # CAPTURE done: how long capture took
    captured: str | None = None     # CAPTURE done: the captured graph's file (capture/captured.json)
    nodes: int | None = None        # CAPTURE done: compute ops in the captured graph
    graph: str | None = None        # CAPTURE done: which graph it is (BEFORE_STAGE_WORDS' key)
    note: str | None = None         # REPORT_RETRY: what the retry leaves out

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


Progress = Callable[[ProgressEvent], None]


def ignore(event: ProgressEvent) -> None:
    """A Progress that listens to nothing."""
