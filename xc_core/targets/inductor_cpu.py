"""`inductor-cpu`: torch.compile with its default backend, TorchInductor, on the CPU — the compiler most PyTorch
users meet first. The captured ExportedProgram is compiled and run for real (measured numerics); every kernel
Inductor generated is read back as a node with the source ops it absorbed.

Provenance comes from Inductor itself: with `torch._inductor.config.trace.provenance_tracking_level = 1` its
debug trace holds `inductor_provenance_tracking_node_mappings.json`, which maps each generated kernel (by its
debug handle, e.g. `cpp_fused__native_batch_norm_legit_no_training_hardtanh_1:3`) to the post-grad FX nodes it
computes (`cppCodeToPost`) and each post-grad node to the pre-grad nodes it came from (`postToPre`). The pre-grad
graph is the ExportedProgram's own, so its node names are the captured graph's source op ids. The order kernels
run in is read from the generated `output_code.py` (one "[Provenance debug handles]" comment per call).

Time per kernel: the kernels are generated with `torch._inductor.config.cpp.enable_kernel_profile` on, so each
generated C++ kernel opens a RecordFunction named after itself (codegen/cpp.py, `KernelGroup.codegen_group`:
`RAIIAtenRecordFunctionHandle record_graph_<id>_<kernel>_`; a check of a flag when no profiler listens). Extern
calls (a convolution, a GEMM, SDPA) are ATen ops the profiler records anyway. Both are the direct children of the
region Inductor's compiled graph runs in (`## Call CompiledFxGraph … ##`, output_code.py `CompiledFxGraph.__call__`),
in the order the straight-line `call` of output_code.py makes them — the order of its debug handles, so the n-th
call of a kernel in a run is the n-th handle of that name.
"""
from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .. import evidence as ev
from ..analysis.layout_audit import LayoutMoves
from ..ir import COMPUTE, LAYOUT, Graph, Node, TensorInfo, precision_of_dtype
from .base import CostRunner, Target, register
from .options import option
from .onnx_regions import _common_path

_HANDLE = re.compile(r"#\s*\[Provenance debug handles\]\s*(\S+)")



@dataclass
class InductorCompiled:
    """What torch.compile hands on to read-back and run."""
    module: Any          # the compiled module
    trace: str           # the folder TORCH_COMPILE_DEBUG wrote (the generated kernels' source)
    fx: list             # the FX graphs Inductor lowered, as recorded


# torch.compile's `mode` (inductor's documented presets: default, reduce-overhead, max-autotune, and
# max-autotune-no-cudagraphs; pytorch.org/docs/stable/generated/torch.compile.html).
@dataclass(frozen=True)
class InductorOptions:
    mode: Literal["default", "max-autotune-no-cudagraphs"] = option(
        "default", help="torch.compile mode: default or max-autotune-no-cudagraphs (autotunes GEMM/conv choices; the "
                        "CUDA-graph modes do not apply on the CPU)")


@register
class InductorCpu(Target):
    id = "inductor-cpu"
    steps_caption = "Inductor: its pre- and post-grad FX graphs, then its kernels."
    layout_moves = LayoutMoves("Inductor's operand-preparation kernels")
    shipped_with = {"ort-cpu": 14}          # PyTorch's own CPU compiler against the ONNX route
    label = "PyTorch · torch.compile (Inductor, CPU)"
    description = ("torch.compile, default inductor backend, on the CPU; generated kernels read back from Inductor's "
                   "provenance tracking")
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED,
                "fusion": ev.REPORTED}
    relative_cost = 3   # Inductor compiles C++ for every kernel
    from_exported_program = True
    needs_onnx = False
    takes_program = True
    Options = InductorOptions

    @classmethod
    def available(cls):
        import shutil
        if not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")):
            return False, "TorchInductor's CPU backend compiles C++: no C++ compiler (g++) on this host"
        return True, ""

    def accepts(self, captured):
        if captured.exported_program is None and not captured.exported_program_file:
            return False, (f"torch.compile compiles PyTorch programs; this {captured.source.kind} source has no "
                           "ExportedProgram to give it")
        return True, ""

    def _compile(self, captured, workdir, result):
        import torch
        import torch._dynamo
        import torch._inductor.config as inductor_config

        from ..paths import home
        os.makedirs(workdir, exist_ok=True)
        # Inductor's compiled-kernel cache lives beside xc's run store, not in /tmp (xc_core/__init__ sets it before
        # torch is imported), in a slot this worker holds alone (claim_cache_slot); its FX-graph cache is off so every
        # compile generates (and traces) its code.
        cache = os.environ["TORCHINDUCTOR_CACHE_DIR"] = claim_cache_slot(os.path.join(home(), "cache", "inductor"))
        keep_headers = _precompiled_headers_in(cache)
        trace_dir = os.path.join(workdir, "inductor-trace")
        ep = captured.program()
        module = ep.module()
        example = [torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in captured.source.inputs]
        mode = self.settings.mode
        recorder = _FxRecorder()
        with inductor_config.patch({"trace.enabled": True, "trace.debug_dir": trace_dir,
                                    "trace.provenance_tracking_level": 1, "compile_threads": 1,
                                    "cpp.enable_kernel_profile": True,     # kernels the profiler can name
                                    "fx_graph_cache": False, "cpp_cache_precompile_headers": keep_headers,
                                    "pre_grad_custom_pass": recorder.pass_for("pre_grad"),
                                    "post_grad_custom_post_pass": recorder.pass_for("post_grad")}):
            torch._dynamo.reset()
            compiled = torch.compile(module, backend="inductor", mode=None if mode == "default" else mode)
            with torch.no_grad():
                compiled(*example)       # compiling happens at the first call
        found = sorted(glob.glob(os.path.join(trace_dir, "**", "inductor_provenance_tracking_node_mappings.json"),
                                 recursive=True))
        if not found:
            raise RuntimeError("Inductor wrote no provenance mapping (its debug trace is missing)")
        if len(found) > 1:
            result.notes.append(f"torch.compile produced {len(found)} graphs (graph breaks); the first is read back")
        folder = os.path.dirname(found[0])
        result.artifacts += [os.path.join(folder, f) for f in ("output_code.py", "fx_graph_readable.py",
                                                               "fx_graph_transformed.py", "ir_post_fusion.txt",
                                                               "inductor_provenance_tracking_node_mappings.json")
                             if os.path.exists(os.path.join(folder, f))]
        result.info["torch_version"] = torch.__version__
        result.info["compile_mode"] = mode
        return InductorCompiled(module=compiled, trace=folder, fx=recorder.graphs)

    def _inspect(self, compiled, captured, result) -> Graph:
        with open(os.path.join(compiled.trace, "inductor_provenance_tracking_node_mappings.json")) as f:
            mapping = json.load(f)
        with open(os.path.join(compiled.trace, "output_code.py")) as f:
            order = list(dict.fromkeys(_HANDLE.findall(f.read())))
        kernel_to_post = mapping.get("cppCodeToPost") or {}
        post_to_pre = mapping.get("postToPre") or {}
        listed = set(order)
        order += [h for h in kernel_to_post if h not in listed]
        before = captured.before
        by_id = before.by_id()
        position = {n.id: i for i, n in enumerate(before.nodes)}     # indexes built once: linear in the graph
        result.input_graph = before
        kernels = []
        for handle in order:
            pre = {p for post in kernel_to_post.get(handle, []) for p in post_to_pre.get(post, []) if p in by_id}
            ordered = sorted(pre, key=position.__getitem__)     # in the order the program runs them
            kernels.append((handle, ordered, set(kernel_to_post.get(handle, []))))
        extern_posts = set().union(*(posts for h, _, posts in kernels if not h.startswith("cpp_fused")), set())
        g = Graph(name=captured.source.name, stage="inductor")
        produced_by = {t.name: n.id for n in before.nodes for t in n.outputs}
        consumers: dict[str, set] = {}
        for n in before.nodes:
            for t in n.inputs:
                consumers.setdefault(t.name, set()).add(n.id)
        graph_outputs = {t.name for t in before.outputs}
        for handle, pre, posts in kernels:
            name = handle.rsplit(":", 1)[0]
            inside = set(pre)
            ins = [t for nid in pre for t in by_id[nid].inputs if produced_by.get(t.name) not in inside]
            outs = [t for nid in pre for t in by_id[nid].outputs
                    if t.name in graph_outputs or consumers.get(t.name, set()) - inside]
            # A generated kernel that computes only what an extern kernel (a oneDNN convolution, a GEMM) also
            # computes is that call's operand preparation — copying into the layout the library wants.
            layout = name.startswith("cpp_fused") and posts and posts <= extern_posts
            dtypes = [t.dtype for t in outs + ins if t.dtype]
            g.nodes.append(Node(
                id=handle, op_type="cpp_fused" if name.startswith("cpp_fused") else _extern_op(name),
                kind=LAYOUT if layout else COMPUTE,
                inputs=[TensorInfo(t.name, t.shape, t.dtype) for t in _unique_by_name(ins)],
                outputs=[] if layout else [TensorInfo(t.name, t.shape, t.dtype) for t in _unique_by_name(outs)],
                attributes={"kernel": name, "post_grad_nodes": sorted(posts)},
                backend="cpu", kernel=name, precision=precision_of_dtype(dtypes[0]) if dtypes else "fp32",
                source_ops=list(pre), fused_from=list(pre),
                module_path=_innermost_module([by_id[p].module_path for p in pre])))
        result.info["kernels"] = {"generated": sum(1 for n in g.nodes if n.op_type == "cpp_fused"),
                                  "extern": sum(1 for n in g.nodes if n.op_type != "cpp_fused"),
                                  "layout": sum(1 for n in g.nodes if n.kind == LAYOUT)}
        result.stages.extend(_steps(compiled.fx, post_to_pre, before, g))
        return g

    def _run(self, compiled, inputs, captured, result):
        import torch
        from torch.utils._pytree import tree_leaves
        args = [torch.from_numpy(np.asarray(inputs[s.name], order="C")) for s in captured.source.inputs]
        with torch.no_grad():
            leaves = [x for x in tree_leaves(compiled.module(*args)) if isinstance(x, torch.Tensor)]
        return {name: t.detach().numpy() for name, t in zip(captured.output_names, leaves)}

    # -- cost (targets/run_cost.py) --------------------------------------------------------------------------
    def _cost_runner(self, compiled, inputs, captured):
        import torch
        args = [torch.from_numpy(np.asarray(inputs[s.name], order="C")) for s in captured.source.inputs]

        def run():
            with torch.no_grad():
                return compiled.module(*args)
        return CostRunner(run=run, load_what=(
            "inside compile_s: torch.compile generates and builds its kernels at the first call, in this process; "
            "there is no compiled artifact to load apart"))

    def _artifact_paths(self, compiled, result):
        return [], ("torch.compile keeps its generated kernels in its cache and in the process that compiled them: "
                    "no artifact ships (the trace files are xc's read-back)")

    profile_method = ("torch.profiler (CPU activity, record_shapes off) over runs of the compiled module: each "
                      "generated C++ kernel's own RecordFunction (Inductor's cpp.enable_kernel_profile) and each "
                      "extern ATen call, the direct children of the compiled graph's region, matched to the debug "
                      "handles of output_code.py in call order; the first run left out as warm-up")

    def _profile(self, compiled, inputs, captured, result, runs):
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function

        from .base import RUN_KEY
        args = [torch.from_numpy(np.asarray(inputs[s.name], order="C")) for s in captured.source.inputs]
        handles = [n.id for n in result.graph.nodes]      # in the order output_code.py's `call` makes them
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
            for k in range(runs + 1):
                with record_function(f"{_RUN_EVENT}{k}"):
                    compiled.module(*args)
        events = prof.events()
        by_run: dict[int, Any] = {}
        regions: dict[int, list] = {}
        for e in events:
            if e.name.startswith(_RUN_EVENT) and e.cpu_parent is None:
                by_run[int(e.name[len(_RUN_EVENT):])] = e
        for e in events:
            if e.name.startswith(_GRAPH_REGION):
                run = _enclosing_run(e)
                if run is not None:
                    regions.setdefault(int(run.name[len(_RUN_EVENT):]), []).append(e)
        out: dict[str, list[float]] = {RUN_KEY: []}
        unmatched_runs = 0
        for k in range(1, runs + 1):                       # run 0 is the warm-up
            if k not in by_run:
                continue
            out[RUN_KEY].append(float(by_run[k].cpu_time_total))
            # With graph breaks a run has one region per compiled graph: the one whose calls are the read-back
            # graph's handles (the first graph) is the one whose kernels match them.
            best: dict[str, float] = {}
            glue = 0.0
            for region in regions.get(k, []):
                times, left = _match_calls(handles, region.cpu_children)
                if len(times) > len(best):
                    best, glue = times, left
            if len(best) < len(handles):
                unmatched_runs += 1
            for h, us in best.items():
                out.setdefault(h, []).append(us)
            out.setdefault(_GLUE_KEY, []).append(glue)
        if not any(h in out for h in handles):
            raise RuntimeError("no profiler event of the compiled graph's region matched a kernel of output_code.py")
        if unmatched_runs:
            result.notes.append(f"time per node: in {unmatched_runs} of {runs} profiled run(s) some kernels of "
                                "output_code.py had no profiler event; they are left untimed in those runs")
        return out


# A profiled run's own RecordFunction (each run's whole time, and what tells the runs apart).
_RUN_EVENT = "xc::inductor_profiled_run_"
# The RecordFunction Inductor opens around a compiled graph's `call` (torch/_inductor/output_code.py).
_GRAPH_REGION = "## Call CompiledFxGraph"
# What the region's direct children spend outside the graph's matched calls (allocations the wrapper makes): no
# node's id, so attach_node_times counts it as unattributed.
_GLUE_KEY = "<inductor wrapper: allocations, unmatched calls>"
_GRAPH_PREFIX = re.compile(r"^graph_\d+_")


def _enclosing_run(e):
    while e.cpu_parent is not None:
        e = e.cpu_parent
    return e if e.name.startswith(_RUN_EVENT) else None


def _match_calls(handles: list[str], children) -> tuple[dict[str, float], float]:
    """The region's direct children matched to the handles in call order: each handle takes the next child that is
    a call of any handle if it is its own — a generated kernel by its name (the RecordFunction is
    `graph_<id>_<kernel>`), an extern call by its ATen op (`extern_kernels.convolution` is `aten::convolution`,
    `torch.ops.mkldnn._convolution_pointwise.default` is `mkldnn::_convolution_pointwise`); a handle whose call is
    not next stays untimed rather than take a later call of the same name. Children that are no handle's call are
    the wrapper's glue; with calls no handle took, the time left unattributed. Returns ({handle: µs}, that µs)."""
    children = sorted(children, key=lambda e: e.time_range.start)
    wanted = [_expected_event(h) for h in handles]
    kernels, ops = {k for k, _ in wanted if k}, {o for _, o in wanted if o}
    is_call = [_call_name(c.name, kernels, ops) for c in children]
    times: dict[str, float] = {}
    taken = set()
    i = 0
    for h, w in zip(handles, wanted):
        j = i
        while j < len(children) and not is_call[j]:
            j += 1                                  # glue between calls
        if j < len(children) and is_call[j] in w:
            times[h] = float(children[j].cpu_time_total)
            taken.add(j)
            i = j + 1
    glue = sum(float(c.cpu_time_total) for j, c in enumerate(children) if j not in taken)
    return times, glue


def _expected_event(handle: str) -> tuple[str | None, str | None]:
    """(generated kernel name, None) or (None, extern op name) for a debug handle `<name>:<n>`."""
    name = handle.rsplit(":", 1)[0]
    parts = name.split(".")
    if name.startswith("extern_kernels.") and len(parts) == 2:
        return None, parts[1]                    # extern_kernels.<op>: torch.<op>, recorded as aten::<op>
    if name.startswith("torch.ops.") and len(parts) >= 4:
        return None, parts[3]                    # torch.ops.<namespace>.<op>[.<overload>]
    return name, None


def _call_name(event: str, kernels: set, ops: set) -> str | None:
    """The kernel or extern op name a profiler event is a call of (None: not a call of any handle)."""
    kernel = _GRAPH_PREFIX.sub("", event)
    if kernel in kernels:
        return kernel
    if event in kernels:
        return event
    op = event.split("::", 1)[1] if "::" in event else None
    return op if op in ops else None


class _FxRecorder:
    """Inductor's custom-pass hooks, used only to look: each records the FX graph it is handed (pre-grad: what
    Dynamo traced; post-grad: after Inductor's decompositions and pattern passes, before scheduling) and changes
    nothing."""

    def __init__(self):
        self.graphs: dict[str, list[tuple[str, str]]] = {}

    def pass_for(self, name: str):
        from torch._inductor.custom_graph_pass import CustomGraphPass
        graphs = self.graphs

        class Record(CustomGraphPass):
            def __call__(self, graph):
                if name not in graphs:     # the first graph (graph breaks give more; the first is read back)
                    graphs[name] = [(n.name, _fx_target(n.target)) for n in graph.nodes
                                    if n.op == "call_function" and _fx_target(n.target) != "getitem"]

            def uuid(self):
                return f"xc-record-{name}"
        return Record()


def _fx_target(target) -> str:
    """aten.convolution.default → convolution; operator.getitem → getitem."""
    text = getattr(target, "__name__", None) or str(target)
    parts = [p for p in str(target).split(".") if p not in ("default", "aten", "Tensor", "Scalar", "prims")]
    return parts[-1] if "." in str(target) and parts else text


def _steps(fx: dict, post_to_pre: dict, before: Graph, kernels: Graph) -> list:
    """Pre-grad FX, post-grad FX (traced to the source ops by Inductor's postToPre mapping), the fused kernels."""
    from ..lowering import FINAL, FUSION, GRAPH_OPT, IMPORT, KERNEL, Step, graph_step
    by_id = before.by_id()
    steps = []
    pre = fx.get("pre_grad")
    if pre is not None:
        g = Graph(name="pre-grad", stage="inductor-pre-grad")
        for name, target in pre:
            g.nodes.append(Node(id=name, op_type=target, domain="aten", source_ops=[name] if name in by_id else [],
                                module_path=by_id[name].module_path if name in by_id else None, backend="cpu"))
        steps.append(graph_step(IMPORT, "pre-grad FX graph (what Dynamo traced)", g))
    post = fx.get("post_grad")
    if post is not None:
        g = Graph(name="post-grad", stage="inductor-post-grad")
        for name, target in post:
            src = [p for p in post_to_pre.get(name, []) if p in by_id]
            paths = [by_id[p].module_path for p in src]
            g.nodes.append(Node(id=name, op_type=target, domain="aten", source_ops=src, fused_from=src,
                                module_path=_innermost_module(paths), backend="cpu"))
        steps.append(graph_step(GRAPH_OPT, "post-grad FX graph (decomposed, pattern passes applied)", g))
    if not steps:
        steps.append(Step(IMPORT, "pre-grad FX graph", note="Inductor called neither custom-pass hook"))
    steps.append(graph_step(FUSION, "scheduled kernels (generated C++ and extern calls)", kernels, ref=FINAL))
    steps.append(graph_step(KERNEL, "kernels as compiled (operand layout copies marked)", kernels, ref=FINAL))
    return steps


# Two processes compiling into one Inductor cache at once sometimes fail with "ImportError: ….so: file too short":
# one loads a kernel library the other is still writing (the check that it exists is not under Inductor's own lock).
# So each compiling process holds one slot folder of the cache alone — the first free one, so a lone worker always
# compiles into slot 0 and keeps its cache from run to run; two at once use slots 0 and 1, each warm after its
# first use. A slot is held with flock for the rest of the process (the kernels it loaded live there), and the
# kernel drops the lock when the process ends, however it ends.
_CACHE_SLOTS = 64
_HELD_SLOT: tuple[str, int] | None = None       # (slot folder, its lock's descriptor), for this process


def take_free_slot(root: str, slots: int = _CACHE_SLOTS) -> tuple[str, int]:
    """The first slot folder under `root` no other holder has locked, and the open descriptor holding its lock
    (closing it frees the slot). Raises OSError when every slot is held or the folder cannot be written."""
    import fcntl
    os.makedirs(root, exist_ok=True)
    for n in range(slots):
        folder = os.path.join(root, f"slot-{n}")
        fd = os.open(os.path.join(root, f"slot-{n}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        os.makedirs(folder, exist_ok=True)
        return folder, fd
    raise OSError(f"all {slots} Inductor cache slots under {root} are in use")


def claim_cache_slot(root: str) -> str:
    """This process's slot of the Inductor cache at `root` (taken once, held until the process ends)."""
    global _HELD_SLOT
    if _HELD_SLOT is None or os.path.dirname(_HELD_SLOT[0]) != root:
        if _HELD_SLOT is not None:          # another XC_HOME in this process: free the old slot
            os.close(_HELD_SLOT[1])
        _HELD_SLOT = take_free_slot(root)
    return _HELD_SLOT[0]


def _precompiled_headers_in(cache: str) -> bool:
    """Inductor precompiles its C++ headers (~150 MB) into a folder it computes from the system temp dir when torch is
    imported, ignoring TORCHINDUCTOR_CACHE_DIR (torch/_inductor/codecache.py, `_HEADER_DIR`). Point that folder
    into xc's cache; where this torch has no such module globals, precompiling is turned off instead (slower kernel
    builds, nothing in /tmp). Returns whether headers may be precompiled."""
    from torch._inductor import codecache
    if not (hasattr(codecache, "_HEADER_DIR") and hasattr(codecache, "_HEADER_LOCK_DIR")):
        return False
    codecache._HEADER_DIR = os.path.join(cache, "precompiled_headers")
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
    return True


def _extern_op(name: str) -> str:
    """A library call Inductor did not generate: 'extern_kernels.convolution' → 'extern convolution',
    'torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default' → 'extern
    _scaled_dot_product_flash_attention_for_cpu'."""
    parts = [p for p in name.split(".") if p not in ("default", "torch", "ops", "aten", "extern_kernels")]
    return "extern " + (parts[-1] if parts else name)


def _innermost_module(paths: list) -> str | None:
    """The innermost module holding every op a kernel absorbed (a kernel across two blocks sits in their parent)."""
    known = [p for p in paths if p is not None]
    return _common_path(known) if known else None


def _unique_by_name(tensors):
    seen, out = set(), []
    for t in tensors:
        if t.name not in seen:
            seen.add(t.name)
            out.append(t)
    return out
