"""One model's analysis as the fleet runs it, whichever backend runs it: what is planned for it (`Planned`), what
comes back (`ModelOutcome`) and the call between them (`analyze_model`). The local backend (fleet/batch.py) calls
it in a thread, the Ray backend (fleet/ray_backend.py) in a Ray task; batch.py records the outcomes.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field

from ..errors import XcInputError, first_line, hide_paths
from .manifest import FleetModel


@dataclass
class Planned:
    """One model, ready to run: its folder in the output, its run key and the arguments of its analysis."""
    index: int
    model: FleetModel
    folder: str
    key: str | None = None                   # the key of its run over `targets`
    sha256: str | None = None
    kwargs: dict = field(default_factory=dict)
    error: str | None = None
    targets: list[str] = field(default_factory=list)         # the columns this batch compiles for it
    columns: dict[str, str] = field(default_factory=dict)    # target identity (options included) → its column
    cell_keys: dict[str, str] = field(default_factory=dict)  # column → its cell's key
    identities: dict[str, str] = field(default_factory=dict)  # column → the target identity it runs as
    reused: dict[str, str] = field(default_factory=dict)     # column → the stored run its cell is taken from


@dataclass
class ModelOutcome:
    planned: Planned
    report: dict | None = None
    error: str | None = None
    seconds: float = 0.0
    cached: bool = False
    node: str | None = None          # where it ran (a Ray node's address)


def analyze_model(p: Planned, targets: list[str], run_dir: str, jobs: int, cancel=None) -> ModelOutcome:
    """One model's analysis into run_dir; never raises for what the model does (its error is the outcome's)."""
    from ..api import analyze
    shutil.rmtree(run_dir, ignore_errors=True)      # what an interrupted earlier attempt left
    started = time.monotonic()
    try:
        report = analyze(p.model.source, targets, out_dir=run_dir, jobs=jobs, cancel=cancel, **p.kwargs)
    except XcInputError as e:
        return ModelOutcome(p, error=e.for_cli(), seconds=time.monotonic() - started)
    except Exception as e:  # noqa: BLE001 — a bug met on one model is that model's error, not the batch's end
        return ModelOutcome(p, error=f"internal error: {type(e).__name__}: {hide_paths(first_line(e, 300))}",
                            seconds=time.monotonic() - started)
    if cancel is not None and cancel.is_set():
        return ModelOutcome(p, error="cancelled", seconds=time.monotonic() - started)
    return ModelOutcome(p, report=report, seconds=time.monotonic() - started)
