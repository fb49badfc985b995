"""The target protocol. A target compiles the captured model, reads back what its compiler did into the IR, and
runs it. Polygraphy's idiom: the public `execute_target` validates and times; a target writes only the `_compile`,
`_inspect` and `_run` hooks that differ. Optional dependencies are imported inside the hooks, so `xc_core` imports
without them and `available()` can say what is missing.

`execute_target` is the one call that runs a target; it takes and returns plain data so it can move into an
isolated worker process later without changing callers.
"""
from __future__ import annotations

import abc
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from ..errors import summarize_error
from ..ir import Graph
from ..outputs import normalize_outputs

MAX_ERROR_DETAIL = 20_000

OK, ERROR, UNAVAILABLE = "ok", "error", "unavailable"


@dataclass
class TargetResult:
    target: str                       # identity: the id, plus options when a target takes any
    status: str = OK
    error: str | None = None
    error_stage: str | None = None    # compile | inspect | run
    error_detail: str | None = None   # the runtime's whole message; `error` is its one-line summary
    graph: Graph | None = None
    stages: list[Graph] = field(default_factory=list)   # graphs after intermediate lowering stages
    outputs: dict[str, Any] = field(default_factory=dict)  # output name -> numpy array
    evidence: dict[str, str] = field(default_factory=dict)  # assignment / precision / numerics -> kind
    info: dict[str, Any] = field(default_factory=dict)      # target-specific, JSON-serialisable facts
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)


class Target(abc.ABC):
    """Subclass, set the class attributes, implement the hooks. Register with @register."""
    id: ClassVar[str]
    label: ClassVar[str]
    description: ClassVar[str]
    # Evidence kinds of what this target reports: where the backend assignment, the precision and the output
    # numbers come from (DESIGN.md, "Targets").
    evidence: ClassVar[dict[str, str]]
    accelerated: ClassVar[bool] = False   # has an accelerator the graph can fall back from
    option_names: ClassVar[tuple[str, ...]] = ()  # options a user may set (CLI --option, dashboard)
    is_reference: ClassVar[bool] = False

    def __init__(self, **options):
        self.options = options

    @property
    def identity(self) -> str:
        """Options are part of a target's identity: the same target with other flags is another column."""
        if not self.options:
            return self.id
        return self.id + "[" + ",".join(f"{k}={v}" for k, v in sorted(self.options.items())) + "]"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, ""

    needs_onnx: ClassVar[bool] = True    # compiles the captured ONNX (a Core ML upload has none)
    # How the target obtains intermediate values without changing its compiled graph (None: it cannot).
    intermediates_method: ClassVar[str | None] = None

    def accepts(self, captured) -> tuple[bool, str]:
        """Whether this target can take this source at all (e.g. the torch reference needs a PyTorch source)."""
        if self.needs_onnx and captured.onnx_path is None:
            return False, f"{self.id} compiles ONNX; a compiled {captured.source.kind} model has none to give it"
        return True, ""

    # hooks --------------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def _compile(self, captured, workdir: str, result: TargetResult) -> Any:
        """Compile; return whatever _inspect and _run need."""

    @abc.abstractmethod
    def _inspect(self, compiled, captured, result: TargetResult) -> Graph:
        """Read the compiled graph back into the IR."""

    @abc.abstractmethod
    def _run(self, compiled, inputs: dict, captured, result: TargetResult) -> dict:
        """Run on the inputs; return output name -> numpy array."""

    def _intermediates(self, compiled, inputs: dict, captured, result: TargetResult,
                       probes: list[str]) -> dict:
        """Values of the outputs of the source ops in `probes` (source op id -> numpy array), for those whose
        tensor survives compilation on this target. Targets that can, override this and set
        `intermediates_method`."""
        return {}


REGISTRY: dict[str, type[Target]] = {}


def register(cls: type[Target]) -> type[Target]:
    REGISTRY[cls.id] = cls
    return cls


def execute_target(target: Target, captured, inputs: dict, workdir: str,
                   log: Callable[[str], None] | None = None, probes: list[str] | None = None) -> TargetResult:
    """Compile, inspect and run one target; every failure becomes a value in the result."""
    result = TargetResult(target=target.identity, evidence=dict(target.evidence))
    ok, why = target.available()
    if not ok:
        result.status, result.error = UNAVAILABLE, why
        return result
    ok, why = target.accepts(captured)
    if not ok:
        result.status, result.error = UNAVAILABLE, why
        return result
    compiled = None
    for stage in ("compile", "inspect", "run"):
        t0 = time.perf_counter()
        try:
            if stage == "compile":
                compiled = target._compile(captured, workdir, result)
            elif stage == "inspect":
                result.graph = target._inspect(compiled, captured, result)
            else:
                raw = target._run(compiled, inputs, captured, result)
                result.outputs, skipped, matching = normalize_outputs(raw, list(captured.output_names or []))
                if skipped:
                    result.info["outputs_not_compared"] = skipped
                if matching["matched_by"] != "name" or matching["converted"]:
                    result.info["output_matching"] = matching
        except Exception as e:  # noqa: BLE001 — any compiler failure is a finding, not a crash
            result.status, result.error_stage = ERROR, stage
            result.error = f"{stage} failed: {type(e).__name__}: {summarize_error(str(e)) or type(e).__name__}"
            result.error_detail = str(e).strip()[:MAX_ERROR_DETAIL] or None
            result.info["traceback"] = traceback.format_exc(limit=6)
            if log:
                log(f"{target.identity}: {result.error}")
            # A graph that was read back is still worth showing when only running failed.
            return result
        finally:
            result.timings[stage] = round(time.perf_counter() - t0, 4)
    if probes and target.intermediates_method:
        t0 = time.perf_counter()
        try:
            result.info["_intermediates_by_op"] = target._intermediates(compiled, inputs, captured, result, probes)
            result.info["intermediates_method"] = target.intermediates_method
        except Exception as e:  # noqa: BLE001 — per-layer drift is optional; say why it is missing
            result.notes.append(f"intermediate values unavailable: {type(e).__name__}: {_first_line(e)}")
        result.timings["intermediates"] = round(time.perf_counter() - t0, 4)
    return result


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return type(e).__name__
