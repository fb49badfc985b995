"""The target protocol. A target compiles the captured model, reads back what its compiler did into the IR, and
runs it. Polygraphy's idiom: the public `execute_target` (targets/execute.py) validates and times; a target writes
only the `_compile`, `_inspect` and `_run` hooks that differ. Optional dependencies are imported inside the hooks,
so `xc_core` imports without them and `available()` can say what is missing.
"""
from __future__ import annotations

import abc
import contextlib
import time
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ..analysis.layout_audit import LAYOUT_NODES, LayoutMoves
from ..ir import Graph
from ..lowering import Step
from .options import NoOptions, OptionSpec, check, identity_of, option_specs

MAX_ERROR_DETAIL = 20_000

OK, ERROR, UNAVAILABLE = "ok", "error", "unavailable"


@dataclass
class TargetResult:
    """What one target run produced. Every field is plain data or an IR Graph or a numpy array, so a result
    crosses a process boundary as files (`save` / `load`) and becomes a report block without private keys."""
    target: str                       # identity: the id, plus options when a target takes any
    status: str = OK
    error: str | None = None
    error_stage: str | None = None    # the phase it failed in: compile | inspect | run (or the worker's phase)
    error_detail: str | None = None   # the runtime's whole message; `error` is its one-line summary
    graph: Graph | None = None
    # The toolchain's steps mapped onto the six canonical stages (xc_core/lowering.py), each with the graph after it
    # where the toolchain gives one. The last step's graph may be the final graph itself (`graph` is then None
    # and `name` says so): it is stored once.
    stages: list[Step] = field(default_factory=list)
    # The graph this target's compiler was given, when it is not the captured ONNX (int8: the quantized model;
    # Core ML: the MIL program before its passes). `fused_from` ids refer to it.
    input_graph: Graph | None = None
    outputs: dict[str, Any] = field(default_factory=dict)  # output name -> numpy array
    intermediates: dict[str, Any] = field(default_factory=dict)  # source op id -> numpy array (per-layer drift)
    intermediates_method: str | None = None
    # Task accuracy (--data): output name -> the target's outputs for every dataset sample it ran, stacked on a
    # leading sample axis (targets/dataset_runs.py), and how that run went (samples run, why it stopped).
    dataset_outputs: dict[str, Any] = field(default_factory=dict)
    dataset_run: dict | None = None
    # What running the target cost on this host: phase memory peaks, steady-state run times, the runtime's own
    # memory figures (targets/run_cost.py; the report's `cost` block is made from it by analysis/cost.py).
    cost: dict | None = None
    partitioning: dict | None = None            # accelerated targets: partitions, unsupported ops, shares
    partitioning_as_shipped: dict | None = None  # the same, for the model with its dynamic dims
    boundaries: dict | None = None              # accelerator <-> CPU boundaries and the latency-cliff estimate
    compute_units: dict | None = None           # Core ML: share and counts per compute unit
    numerics_assumption: str | None = None      # what the output numbers stand for
    # The precisions other than fp32 this target's configuration asks for (Core ML fp16, int8 quantization, an
    # fp16 EP emulation, an OpenVINO precision hint): lower precision seen anywhere else is the runtime's own choice.
    declared_precisions: list[str] = field(default_factory=list)
    numerics_failed: dict | None = None         # xc could not emulate the numbers: why, and what it tried
    # This host cannot run the compiled program and xc does not emulate it: why (no figure is made up).
    numerics_not_run: str | None = None
    # The time per compiled node (each node's `measured_us`): how it was measured, on which CPU, over how many
    # profiled runs, and how much of the run it accounts for (see `attach_node_times`).
    node_times: dict | None = None
    evidence: dict[str, str] = field(default_factory=dict)  # assignment / precision / numerics -> kind
    info: dict[str, Any] = field(default_factory=dict)      # target-specific, JSON-serialisable facts
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)
    traceback: str | None = None
    contract: list[str] = field(default_factory=list)  # what the conformance checks found wrong

    _GRAPHS = ("graph", "input_graph")
    _ARRAYS = ("outputs", "intermediates", "dataset_outputs")

    @contextlib.contextmanager
    def toolchain_call(self, phase: str):
        """Times a toolchain call made inside one of xc's own phases (inspect: ORT's per-level sessions, OpenVINO's
        MOC pass and runtime model; profile: the profiling session and its runs), summed under
        timings["<phase>_toolchain"]: the benches count it as the toolchain's, the rest of the phase as xc's."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            key = toolchain_key(phase)
            self.timings[key] = round(self.timings.get(key, 0.0) + time.perf_counter() - t0, 4)

    def save(self, folder: str) -> None:
        """result.json (plain JSON) + arrays.npz (every array, read back with allow_pickle=False)."""
        import json
        import os

        import numpy as np
        data, arrays = {}, {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in self._GRAPHS:
                data[f.name] = value.to_dict() if value is not None else None
            elif f.name == "stages":
                data[f.name] = [step.to_dict() for step in value]
            elif f.name in self._ARRAYS:
                names = {}
                for k, a in value.items():
                    key = f"a{len(arrays)}"
                    arrays[key] = np.asarray(a)
                    names[k] = key
                data[f.name] = names
            else:
                data[f.name] = value
        with open(os.path.join(folder, "arrays.npz"), "wb") as fh:
            np.savez(fh, **arrays)
        with open(os.path.join(folder, "result.json"), "w") as fh:
            fh.write(json.dumps(data, default=_json_scalar, separators=(",", ":")))

    @classmethod
    def load(cls, folder: str) -> "TargetResult":
        import json
        import os

        import numpy as np
        with open(os.path.join(folder, "result.json")) as fh:
            data = json.load(fh)
        with np.load(os.path.join(folder, "arrays.npz"), allow_pickle=False) as z:
            for name in cls._ARRAYS:
                data[name] = {k: z[key] for k, key in data[name].items()}
        for name in cls._GRAPHS:
            data[name] = Graph.from_dict(data[name]) if data[name] is not None else None
        data["stages"] = [Step.from_dict(d) for d in data["stages"]]
        return cls(**data)


def _json_scalar(o):
    import numpy as np
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} in a TargetResult is not plain data")


class Target(abc.ABC):
    """Subclass, set the class attributes, implement the hooks. Register with @register."""
    id: ClassVar[str]
    label: ClassVar[str]
    description: ClassVar[str]
    # Evidence kinds of what this target reports: where the backend assignment, the precision and the output
    # numbers come from.
    evidence: ClassVar[dict[str, str]]
    # The accelerator the graph can fall back from ("NNAPI", "Apple Neural Engine"), None for a CPU-only target.
    # The report says it for every target (`accelerated`, `accelerator`); the Fallbacks page and the checklist
    # read that, not the presence of a toolchain's partitioning record.
    accelerator: ClassVar[str | None] = None
    # The options a user may set (CLI --option, ID[KEY=VALUE], the dashboard's variant form): a frozen dataclass
    # whose fields carry each option's type, default and help (targets/options.py derives the rest from it).
    Options: ClassVar[type] = NoOptions
    # What the family says about itself, read by the pages and views (never written into the report):
    # - the Stages page's sentence on where this family's steps come from (one per family: set it on its base class);
    steps_caption: ClassVar[str | None] = None
    # - the targets users ship together with this one, each with its rank: the Overview's default pairs are the
    #   lowest ranks (a pair is declared once, on either of its two targets);
    shipped_with: ClassVar[dict[str, int]] = {}
    # - what an artifact is, by its file name, where the name alone does not say (the Downloads page);
    artifact_notes: ClassVar[dict[str, str]] = {}
    # - where the layout audit's facts come from in its compiled graph (analysis/layout_audit.py).
    layout_moves: ClassVar[LayoutMoves] = LAYOUT_NODES
    is_reference: ClassVar[bool] = False
    # Why this target is out of xc's default set, in one line users see beside it (the target picker, `xc targets`,
    # its report notes); None: in the default set. A deprecated target still runs when asked for by id.
    deprecated: ClassVar[str | None] = None

    @classmethod
    def in_default_set(cls) -> bool:
        """Whether a run that names no targets (`xc analyze` without --targets, the dashboard's first selection)
        includes this one."""
        return cls.deprecated is None

    # Which catalogue of its compiler's fusions applies (analysis/fusion_catalogue.py); None: none is kept.
    fusion_catalogue: ClassVar[str | None] = None
    # The libraries this target's worker imports beyond the capture's (torch, ONNX, ONNX Runtime): a CLI run
    # preloads only the requested targets' into the worker forkserver (xc_core._preload).
    worker_modules: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **options):
        self.options = options      # the options set, as checked (`check_options`): they make the identity
        self.settings = self.Options(**options)     # the same, typed, with the defaults of those not set
        self.limits = None     # the run's Limits (xc_core.limits), set by whoever runs the target
        # The inputs the run uses, set by execute_target before compiling: a target that calibrates while it
        # compiles (PT2E static quantization) reads them.
        self.calibration_inputs: dict | None = None

    @property
    def identity(self) -> str:
        """Options are part of a target's identity: the same target with other flags is another column."""
        return identity_of(self.id, self.options)

    @property
    def accelerated(self) -> bool:
        return self.accelerator is not None

    @property
    def display_label(self) -> str:
        """The label of this target as configured: a variant names the options it sets."""
        if not self.options:
            return self.label
        return f"{self.label} · " + ", ".join(f"{k}={v}" for k, v in sorted(self.options.items()))

    @property
    def folder_name(self) -> str:
        """The artifacts folder of this target: its id, plus its options for a variant (ort-cpu--level-basic)."""
        if not self.options:
            return self.id
        text = "-".join(f"{k}-{v}" for k, v in sorted(self.options.items()))
        return self.id + "--" + "".join(c if c.isalnum() or c in "._-" else "_" for c in text)

    @classmethod
    def option_specs(cls) -> tuple[OptionSpec, ...]:
        """This target's options, read off its Options dataclass (what `xc targets` and the dashboard list)."""
        return option_specs(cls.Options)

    @classmethod
    def check_options(cls, options: dict, where: str) -> dict:
        """Options as this target names them (aliases resolved), each value one it accepts; else one line."""
        return check(cls.Options, cls.id, options, where)

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, ""

    needs_onnx: ClassVar[bool] = True    # compiles the captured ONNX (a Core ML upload has none)
    # Roughly how long this target takes next to the others (1: an ORT session). Isolated workers start the
    # costliest first, so the slowest target is not the last to begin when there are fewer cores than targets.
    relative_cost: ClassVar[int] = 1
    # Compiles from the ExportedProgram alone (PyTorch sources), not the ONNX: an isolated worker may start it as
    # soon as torch.export has finished, while the ONNX export is still running.
    from_exported_program: ClassVar[bool] = False
    # Compiles PyTorch programs: an ONNX source reaches it through xc's ONNX → PyTorch route (targets/routed.py).
    takes_program: ClassVar[bool] = False
    # How the target obtains intermediate values without changing its compiled graph (None: it cannot).
    intermediates_method: ClassVar[str | None] = None
    # How the target times each compiled node (the runtime's profiler and what it reports), None: it cannot.
    profile_method: ClassVar[str | None] = None

    def needs_live_source(self, kind: str) -> bool:
        """Whether this target reads the loaded model itself (an nn.Module, a Core ML program, an OpenVINO IR),
        not only the captured files. A worker loads the source again only for targets that do."""
        return False

    def accepts(self, captured) -> tuple[bool, str]:
        """Whether this target can take this source at all (e.g. the torch reference needs a PyTorch source)."""
        if self.needs_onnx and captured.onnx_path is None:
            return False, f"{self.id} compiles ONNX; a compiled {captured.source.kind} model has none to give it"
        return True, ""

    def too_big(self, captured) -> dict | None:
        """Targets whose own toolchain slows down badly on big graphs skip them by default: None to go ahead, or
        {"nodes", "limit", "why"} to skip, `why` naming the size, the limit and how to raise it. The targets that
        compile a PyTorch program skip programs above --max-program-nodes."""
        if not self.takes_program or captured.before is None:
            return None
        from ..limits import Limits
        limit = (self.limits or Limits.from_env()).max_program_nodes
        return program_too_big(sum(n.kind == "compute" for n in captured.before.nodes), limit, "the program")

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

    def _profile(self, compiled, inputs: dict, captured, result: TargetResult, runs: int) -> dict[str, list[float]]:
        """Run the compiled model `runs` more times with the runtime's profiler on, after the run whose outputs
        are compared (so profiling never distorts it). Returns compiled node id -> its time in each run, in
        microseconds (a node with several events in one run: their sum); the key RUN_KEY, if present, holds the
        whole run's time per run. Targets that can, override this and set `profile_method`."""
        return {}

    # -- what running it costs (targets/run_cost.py) ---------------------------------------------------------
    # Whether the profiled runs time the very call the steady runs would (same compiled model and configuration,
    # wall clock around the whole run): their whole-run times then stand for the steady runs, with no more runs.
    profiled_runs_are_steady: ClassVar[bool] = False
    # Why the cost block has no figure of the runtime's own for its memory, when the hook below gives none.
    runtime_memory_absent: ClassVar[str] = "the runtime gives no figure of its own for its memory"

    def _cost_runner(self, compiled, inputs: dict, captured) -> "CostRunner | None":
        """How the cost block times this target's inferences (None: it cannot, and says so)."""
        return None

    def _artifact_paths(self, compiled, result: TargetResult) -> tuple[list[str], str]:
        """The compiled artifact(s) a user ships (files or package folders), and why there are none when the list
        is empty. By default every artifact the target listed, less a .zip of a folder listed beside it (the
        Downloads page's copy)."""
        listed = set(result.artifacts)
        return [p for p in result.artifacts if not (p.endswith(".zip") and p[:-4] in listed)], ""

    def _runtime_memory(self, compiled, result: TargetResult) -> list[dict]:
        """The runtime's or compiler's own figures for its memory: {name, bytes, what, by, evidence} each."""
        return []


@dataclass
class CostRunner:
    """How the cost block times a target's inferences on the analysis inputs, on its own run path without xc's
    read-back. Either `load` — which loads the compiled artifact afresh, as an app would, and returns the call that
    runs it once (the load is timed, and its first call is the first inference) — or `run`, one inference on the
    model the analysis already ran, when loading is not separable from compiling; `load_what` says what the load
    covers, or where loading happens instead."""
    load_what: str
    load: Any = None        # () -> (() -> Any)
    run: Any = None         # () -> Any


# The key of `_profile`'s answer that holds the whole run's time per run (no node has this id).
RUN_KEY = "<whole run>"


def needs_exported_program(captured, what: str) -> tuple[bool, str]:
    """For a target that takes PyTorch programs only (`what`: "ExecuTorch lowers"): ok, or why this source cannot
    reach it (an ONNX source reaches it through the ONNX → PyTorch route, as a view that has the program)."""
    if captured.exported_program is not None or captured.exported_program_file:
        return True, ""
    return False, f"{what} PyTorch programs; this {captured.source.kind} source has no ExportedProgram to give it"


def source_tensors(inputs: dict, captured) -> list:
    """The analysis inputs as torch tensors, in the source's input order. A 0-d input stays 0-d (numpy's
    ascontiguousarray would make it 1-d, and a runtime then refuses the input, as ExecuTorch's set_inputs does)."""
    import numpy as np
    import torch
    return [torch.from_numpy(np.array(inputs[s.name], order="C")) for s in captured.source.inputs]


def dist_version(name: str) -> str | None:
    """The installed version of a distribution (None when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name)
    except PackageNotFoundError:
        return None


REGISTRY: dict[str, type[Target]] = {}


def register(cls: type[Target]) -> type[Target]:
    REGISTRY[cls.id] = cls
    return cls


# Profiled node executions per target (runs × compiled nodes) beyond which a big graph gets fewer runs: a profiler
# records an event per node and run (ORT's trace of one 20,000-node run is 100 MB of JSON), so five runs cost twice
# the compile there, while the median per node needs only a few samples. 40,000: the samples keep all their runs up
# to 8,000 nodes.
PROFILED_NODE_RUNS = 40_000
MIN_PROFILE_RUNS = 2


def skip_above(nodes: int, limit: int, limit_key: str, what: str, reason: str, unit: str = "nodes") -> dict | None:
    """A target's skip for a graph of `nodes` above `limit` (None when it fits): {"nodes", "limit", "why"}, `why`
    one line naming the size, the limit, `reason` it exists and the flag and variable that raise it."""
    if nodes <= limit:
        return None
    from ..limits import LIMITS
    lim = LIMITS[limit_key]
    return {"nodes": nodes, "limit": limit,
            "why": f"skipped: {what} {nodes:,} {unit}, above the {limit:,}-node limit for {reason}; raise it with "
                   f"{lim.flag} or the environment variable {lim.env}"}


def program_too_big(nodes: int, limit: int, what: str) -> dict | None:
    """The skip of a PyTorch program of `nodes` compute nodes above `limit` (None when it fits)."""
    return skip_above(nodes, limit, "max_program_nodes", f"{what} has",
                      "the targets that compile a PyTorch program (their lowering grows with the program: ExecuTorch "
                      "XNNPACK took 130 s at 1,007 nodes on a 2-core machine, and every one of them ran past the "
                      "300 s worker limit at 20,007)")


def toolchain_key(phase: str) -> str:
    """The timings key of the toolchain's calls inside xc's phase `phase` (see TargetResult.toolchain_call)."""
    return f"{phase}_toolchain"


def profile_runs(target: Target, nodes: int = 0) -> int:
    """How many profiled runs the run's limits ask of each target (XC_PROFILE_RUNS / --profile-runs); a graph of
    more than PROFILED_NODE_RUNS / runs nodes gets fewer, at least MIN_PROFILE_RUNS (node_times.runs says how
    many)."""
    from ..limits import Limits
    asked = int((target.limits or Limits.from_env()).profile_runs)
    if asked <= MIN_PROFILE_RUNS or nodes * asked <= PROFILED_NODE_RUNS:
        return asked
    return max(MIN_PROFILE_RUNS, PROFILED_NODE_RUNS // nodes)


def attach_node_times(result: TargetResult, samples: dict[str, list[float]], method: str, runs: int,
                      cpu_wait: float | None = None) -> None:
    """Each compiled node's median time over the profiled runs into its `measured_us`, and the `node_times`
    block: evidence `measured`, the host CPU, the method, the coverage of compute nodes, what the profiler timed
    that is no node of the graph (its own copies, the runtime's glue) as `unattributed_us`, the per-run samples
    behind every median (`samples_us`: each node's, the whole run's, the timed total's) with the spread of the run
    and of the total, and `cpu_wait_share` (see cpu_wait_share): a later comparison tells a change from noise by
    them (analysis/node_time.py)."""
    import statistics

    from .. import evidence as ev
    from ..analysis.node_time import per_run_totals, spread
    from ..ir import COMPUTE
    if not any(values for key, values in samples.items() if key != RUN_KEY):
        return      # the profiler timed no node (ort-nnapi with nothing on the CPU): no block, no evidence
    whole = samples.get(RUN_KEY)
    by_id = result.graph.by_id()
    unattributed = 0.0
    node_samples: dict[str, list[float]] = {}
    for node_id, values in samples.items():
        if node_id == RUN_KEY or not values:
            continue
        median = float(statistics.median(values))
        node = by_id.get(node_id)
        if node is None:
            unattributed += median
        else:
            node.measured_us = round(median, 3)
            node_samples[node_id] = [round(float(v), 3) for v in values]
    compute = [n for n in result.graph.nodes if n.kind == COMPUTE]
    timed = [n for n in result.graph.nodes if n.measured_us is not None]
    totals = per_run_totals(node_samples)
    run_samples = [round(float(v), 3) for v in whole] if whole else None
    result.evidence["time"] = ev.MEASURED
    result.node_times = {
        "evidence": ev.MEASURED, "method": method, "host_cpu": host_cpu(), "runs": runs,
        "statistic": "median over the profiled runs",
        "nodes_timed": len(timed), "compute_nodes": len(compute),
        "compute_nodes_timed": sum(1 for n in compute if n.measured_us is not None),
        "total_us": round(sum(n.measured_us for n in timed), 3),
        "unattributed_us": round(unattributed, 3),
        "run_us": round(float(statistics.median(whole)), 3) if whole else None,
        "samples_us": {"nodes": node_samples, "run": run_samples, "total": totals},
        "spread": {"run_us": spread(run_samples), "total_us": spread(totals)},
        "cpu_wait_share": cpu_wait,
    }


def attach_compiler_estimates(result: TargetResult, graph, per_node_us: dict[str, float], method: str, by: str,
                              unattributed_us: float = 0.0) -> None:
    """A vendor compiler's own time estimate per compiled node (Vela's cycles at the NPU clock) into each node's
    `estimated_us`, and the `node_times` block with evidence `estimated-compiler`: what estimated it (`method`,
    `by`), the coverage of compute nodes and what it estimated that is no node (`unattributed_us`). One figure per
    node and no runs: the compiler's model is deterministic, so there is no spread (a later comparison reads any
    change as the compiler's)."""
    from .. import evidence as ev
    from ..ir import COMPUTE
    by_id = graph.by_id()
    for node_id, us in per_node_us.items():
        if node_id in by_id:
            by_id[node_id].estimated_us = round(float(us), 4)
    compute = [n for n in graph.nodes if n.kind == COMPUTE]
    timed = [n for n in graph.nodes if n.estimated_us is not None]
    result.evidence["time"] = ev.ESTIMATED_COMPILER
    result.node_times = {
        "evidence": ev.ESTIMATED_COMPILER, "method": method, "host_cpu": by, "runs": 0,
        "statistic": "the compiler's estimate (one figure, no runs)",
        "nodes_timed": len(timed), "compute_nodes": len(compute),
        "compute_nodes_timed": sum(1 for n in compute if n.estimated_us is not None),
        "total_us": round(sum(n.estimated_us for n in timed), 4),
        "unattributed_us": round(unattributed_us, 4), "run_us": None,
        "samples_us": {}, "spread": {}, "cpu_wait_share": None,
    }


def cpu_wait_snapshot() -> dict[str, tuple[int, int]] | None:
    """Each thread of this process: (ns on a CPU, ns runnable but waiting for one), from Linux's schedstat; None
    where the kernel does not say."""
    import os
    out = {}
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    on_cpu, waiting = f.read().split()[:2]
                out[tid] = (int(on_cpu), int(waiting))
            except (OSError, ValueError):
                continue        # a thread that ended meanwhile
    except OSError:
        return None
    return out or None


def cpu_wait_share(before: dict | None) -> float | None:
    """The share of its runnable time this process's threads spent waiting for a CPU since `before`: 0 on a quiet
    host; near 0.5 when every core has another busy process. A busy host inflates times far past any run-to-run
    spread — tts-mini's Inductor kernels took 300× longer in every profiled run at 0.62 than at 0.21 — so a time
    comparison reads it (analysis/node_time.HOST_BUSY_SHARE). None where the kernel does not say."""
    after = cpu_wait_snapshot()
    if before is None or after is None:
        return None
    on_cpu = waiting = 0
    for tid, (c, w) in after.items():
        c0, w0 = before.get(tid, (0, 0))
        on_cpu, waiting = on_cpu + c - c0, waiting + w - w0
    return round(waiting / (on_cpu + waiting), 3) if on_cpu + waiting > 0 else None


def host_cpu() -> str:
    """The CPU model this host reports (the times are this CPU's, not a phone's), with its core count."""
    import os
    import platform
    name = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name or platform.processor() or platform.machine()} ({os.cpu_count()} logical cores)"


def check_result(result: TargetResult, captured) -> list[str]:
    """What every target must return, checked the same way for all: unique node ids, `fused_from` ids that are
    nodes of the graph the compiler was given, `source_ops` that are nodes of the captured graph, a backend on
    every compute node. Problems are listed (and shown as a note), not raised: a flaw in how xc read a graph
    back must not hide what the compiler did. The conformance test requires none for every registered target."""
    g = result.graph
    if g is None:
        return []
    problems = []
    ids = [n.id for n in g.nodes]
    dup = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    if dup:
        problems.append(f"{len(dup)} node id(s) repeat: {', '.join(dup[:5])}")
    # The graph the compiler was given: its own (Core ML's MIL, Inductor's FX), else the ONNX for the targets that
    # compile it, else the captured graph itself (the torch reference; a target that started before the ONNX).
    given_graph = result.input_graph or captured.onnx_graph or captured.before
    given = {n.id for n in given_graph.nodes}
    bad_fused = sorted({f for n in g.nodes for f in n.fused_from if f not in given})
    if bad_fused:
        problems.append(f"{len(bad_fused)} fused_from id(s) are not nodes of the graph the compiler was given: "
                        + ", ".join(bad_fused[:5]))
    source = {n.id for n in captured.before.nodes}
    bad_src = sorted({s for n in g.nodes for s in n.source_ops if s not in source})
    if bad_src:
        problems.append(f"{len(bad_src)} source_ops id(s) are not nodes of the captured graph: "
                        + ", ".join(bad_src[:5]))
    no_backend = [n.id for n in g.compute_nodes() if not n.backend]
    if no_backend:
        problems.append(f"{len(no_backend)} compute node(s) have no backend: {', '.join(no_backend[:5])}")
    if problems and result.status == OK:
        result.notes.extend(f"xc's read-back check: {p}" for p in problems)
    return problems


