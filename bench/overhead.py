"""What xc adds beyond the toolchains: for one model and a set of targets, the bare toolchain calls that do the same
work (export once, compile, run, read back what each compiler wrote, convert) against xc's own `analyze`, each in a
fresh process, interleaved, medians of --repeat runs; wall time, CPU time (the process and its workers; and the
whole process tree sampled from outside, since the CLI's forkserver workers escape getrusage) and peak
RSS; then xc's time broken down by its steps, and the share of the analysis its profiled runs (the time per
compiled node) take.

    python bench/overhead.py [--model sample:vision-mini] [--targets ort-cpu,openvino-cpu,coreml-ane] [--repeat 3]

The bare side is what a careful engineer would write by hand for the same answers: torch.export + the dynamo ONNX
exporter once, and per target
- ort-cpu: an ORT_ENABLE_ALL session that writes its optimized model and a profile, one run;
- openvino-cpu: read_model, compile_model (f32, so bf16 CPUs compare alike), one inference, the runtime model;
- coreml-ane / coreml-cpu: one ct.convert to an ML program (fp16 / fp32), its MIL program;
- ort-cpu-int8: quantize_dynamic, then the ort-cpu session on the quantized model;
- ort-nnapi / ort-coreml: ORT's basic optimization and shape inference, its partition checker for the EP, and one
  run on the CPU EP (ort-coreml: with the accelerated partitions converted to fp16 by onnxconverter-common);
- inductor-cpu: torch.compile of the ExportedProgram's module with Inductor's provenance trace (a fresh compile,
  not one from its FX-graph cache), one run;
- executorch-xnnpack / -vulkan / -coreml: to_edge_transform_and_lower with the backend's partitioner,
  to_executorch, the .pte written; XNNPACK's loaded and run once by ExecuTorch's runtime (the other two cannot run
  here);
- executorch-ethos-u55 / -u85: PT2E int8 (EthosUQuantizer with Vela's configuration as xc's defaults, symmetric
  config, calibrated once on the inputs), exported again, to_edge_transform_and_lower with EthosUPartitioner and the
  spec dumping Vela's output (its per-layer CSV read), to_executorch, the .pte written; the partitioned Edge program
  run once with the delegate answered by TOSA's reference model on the TOSA program Vela compiled;
- coreai-cpu / -ane: run_decompositions with coreai_torch's table, TorchConverter.to_coreai, the .aimodel saved,
  lowered to ODIX and run once by Core AI's Linux runtime (coreai-ane: the model in fp16 first);
- litert-xnnpack / -gpu: litert_torch.convert, the .tflite written; xnnpack: LiteRT's interpreter (XNNPACK delegate)
  run once and its op details read; gpu: CompiledModel with the GPU accelerator on SwiftShader, run once;
- the eager PyTorch reference, one run.
`--targets all` takes every one of them.
It covers bundled samples and .pt2 / .onnx files (for a .pt2 the bare side uses torch.export.load: a bench on
your own file, not an upload).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]
BARE_TARGETS = ("ort-cpu", "openvino-cpu", "coreml-ane", "coreml-cpu", "ort-cpu-int8", "ort-nnapi", "ort-coreml",
                "inductor-cpu", "executorch-xnnpack", "executorch-vulkan", "executorch-coreml", "coreai-cpu",
                "coreai-ane", "litert-xnnpack", "litert-gpu", "executorch-ethos-u55", "executorch-ethos-u85")
# bare: the toolchain calls alone; xc-inproc: analyze in this process, one target after another (CPU time and
# peak RSS compare like for like); xc: analyze as the CLI runs it, every step in an isolated worker, as many
# targets at once as there are cores (its workers are not this process's children, so only its wall time is
# comparable).
KINDS = ("bare", "xc-inproc", "xc")


# ------------------------------------------------------------------------------------------------ one run
def _bare(model: str, targets: list[str], workdir: str) -> dict:
    """The toolchain calls alone; seconds per step."""
    import numpy as np
    import torch
    steps: dict[str, float] = {}

    def timed(name):
        class _T:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                steps[name] = steps.get(name, 0.0) + time.perf_counter() - self.t0
        return _T()

    ep = module = None
    onnx_path = os.path.join(workdir, "model.onnx")
    with timed("capture"):
        if model.startswith("sample:"):
            from xc_core.sources.samples import SAMPLES
            sample = SAMPLES[model.split(":", 1)[1]]
            module = sample.model()
            args = tuple(torch.randint(int(s.low or 0), int(s.high or 2), s.shape) if s.dtype == "int64"
                         else torch.randn(s.shape) for s in sample.inputs)
            ep = torch.export.export(module, args)
        elif model.endswith(".pt2"):
            ep = torch.export.load(model)
            args = ep.example_inputs[0]
            module = ep.module()
        if ep is not None:
            torch.onnx.export(ep, args, onnx_path, dynamo=True, verbose=False)
        else:
            onnx_path = model
    import onnxruntime as ort
    feeds = None
    if module is not None:
        with timed("reference"), torch.no_grad():
            module(*args)
        names = [i.name for i in ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"]).get_inputs()]
        feeds = {n: a.numpy() for n, a in zip(names, args)}
    else:
        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape],
                                  dtype=np.int64 if "int64" in i.type else np.float32) for i in sess.get_inputs()}
    def ort_all(path: str, tag: str) -> None:
        import onnx
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = os.path.join(workdir, f"{tag}.optimized.onnx")
        so.enable_profiling, so.profile_file_prefix = True, os.path.join(workdir, f"{tag}.profile")
        s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        s.run(None, feeds)
        s.end_profiling()
        onnx.load(so.optimized_model_filepath)

    for tid in targets:
        with timed(tid):
            if tid == "ort-cpu":
                ort_all(onnx_path, tid)
            elif tid == "ort-cpu-int8":
                from onnxruntime.quantization import QuantType, quantize_dynamic
                quantized = os.path.join(workdir, "int8.onnx")
                quantize_dynamic(onnx_path, quantized, weight_type=QuantType.QInt8)
                ort_all(quantized, tid)
            elif tid in ("ort-nnapi", "ort-coreml"):
                import pathlib

                from onnxruntime.tools.mobile_helpers import usability_checker as checker
                from onnxruntime.tools.onnx_model_utils import ModelProtoWithShapeInfo, optimize_model
                basic = os.path.join(workdir, f"{tid}.basic.onnx")
                optimize_model(pathlib.Path(onnx_path), pathlib.Path(basic),
                               level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
                m = ModelProtoWithShapeInfo(pathlib.Path(basic)).model_with_shape_info
                if tid == "ort-nnapi":
                    checker.check_nnapi_partitions(m, require_fixed_input_sizes=True)
                    ort.InferenceSession(basic, providers=["CPUExecutionProvider"]).run(None, feeds)
                else:
                    from onnxconverter_common import float16
                    info = checker.check_coreml_partitions(m, require_fixed_input_sizes=True,
                                                           config_filename="coreml_supported_mlprogram_ops.md")
                    accelerated = {n.name for group in info.supported_groups for n in group}
                    m16 = float16.convert_float_to_float16(
                        m, keep_io_types=True, node_block_list=[n.name for n in m.graph.node
                                                                if n.name not in accelerated])
                    ort.InferenceSession(m16.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
            elif tid == "inductor-cpu" and ep is not None:
                # The same answers as xc's: kernels traced back to the FX nodes they compute, which needs a fresh
                # compile (not one from the FX-graph cache) with Inductor's provenance tracking on.
                import torch._inductor.config as inductor_config
                with inductor_config.patch({"trace.enabled": True, "trace.provenance_tracking_level": 1,
                                            "trace.debug_dir": os.path.join(workdir, "inductor-trace"),
                                            "fx_graph_cache": False}), torch.no_grad():
                    torch.compile(ep.module())(*args)
            elif tid in ("executorch-ethos-u55", "executorch-ethos-u85") and ep is not None:
                _bare_ethos_u(tid, ep, args, workdir)
            elif tid.startswith("executorch-") and ep is not None:
                from executorch.exir import to_edge_transform_and_lower
                if tid == "executorch-xnnpack":
                    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner as P
                elif tid == "executorch-vulkan":
                    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner as P
                else:
                    from executorch.backends.apple.coreml.partition import CoreMLPartitioner as P
                lowered = to_edge_transform_and_lower(ep, partitioner=[P()])
                lowered.exported_program().graph_module.graph     # what was delegated, what was left
                pte = os.path.join(workdir, f"{tid}.pte")
                with open(pte, "wb") as f:
                    f.write(lowered.to_executorch().buffer)
                if tid == "executorch-xnnpack":
                    from executorch.runtime import Runtime
                    Runtime.get().load_program(pte).load_method("forward").execute(list(args))
            elif tid in ("coreai-cpu", "coreai-ane") and ep is not None:
                import asyncio
                import pathlib

                import coreai_torch
                from coreai.runtime import NDArray
                program = ep
                if tid == "coreai-ane":      # the model in fp16, inputs and outputs as declared
                    class Fp16(torch.nn.Module):
                        def __init__(self, inner):
                            super().__init__()
                            self.inner = inner.to(torch.float16)

                        def forward(self, *xs):
                            out = self.inner(*[x.half() if x.is_floating_point() else x for x in xs])
                            return torch.utils._pytree.tree_map(
                                lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == torch.float16
                                else t, out)
                    import copy
                    program = torch.export.export(Fp16(copy.deepcopy(module)), args, strict=False)
                converter = coreai_torch.TorchConverter()
                converter.add_exported_program(program.run_decompositions(coreai_torch.get_decomp_table()))
                asset = converter.to_coreai().save_asset(pathlib.Path(workdir) / f"{tid}.aimodel")

                async def run_once():
                    async with asset.executable() as m:
                        fn = m.load_function("main")
                        await fn({name: NDArray(np.ascontiguousarray(
                            a.numpy().astype(np.int32) if a.dtype == torch.int64 else a.numpy()))
                            for name, a in zip(fn.desc.input_names, args)})
                asyncio.run(run_once())
            elif tid in ("litert-xnnpack", "litert-gpu") and ep is not None:
                import litert_torch
                tfl = os.path.join(workdir, f"{tid}.tflite")
                litert_torch.convert(ep.module(), args).export(tfl)
                arrays = [a.numpy().astype(np.int32) if a.dtype == torch.int64 else a.numpy() for a in args]
                if tid == "litert-xnnpack":
                    from ai_edge_litert.interpreter import Interpreter
                    it = Interpreter(model_path=tfl)
                    it.allocate_tensors()
                    for d, a in zip(it.get_input_details(), arrays):
                        it.set_tensor(d["index"], a)
                    it.invoke()
                    it._get_ops_details()
                else:
                    os.environ.setdefault("VK_ICD_FILENAMES", "/usr/lib/chromium/vk_swiftshader_icd.json")
                    from ai_edge_litert.compiled_model import CompiledModel
                    from ai_edge_litert.hardware_accelerator import HardwareAccelerator as HA
                    cm = CompiledModel.from_file(tfl, hardware_accel=HA.GPU | HA.CPU)
                    ins, outs = cm.create_input_buffers(0), cm.create_output_buffers(0)
                    for b, a in zip(ins, arrays):
                        b.write(a)
                    cm.run_by_index(0, ins, outs)
            elif tid == "openvino-cpu":
                import openvino as ov
                core = ov.Core()
                cm = core.compile_model(core.read_model(onnx_path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
                cm(list(feeds.values()))
                cm.get_runtime_model().get_ordered_ops()
            elif tid in ("coreml-ane", "coreml-cpu") and ep is not None:
                import coremltools as ct
                precision = ct.precision.FLOAT16 if tid == "coreml-ane" else ct.precision.FLOAT32
                # As xc does: the ExportedProgram decomposed with no table first, then with the default one (an
                # LSTM converts only unrolled by the default table).
                for table in ({}, None):
                    try:
                        decomposed = ep.run_decompositions(table) if table is not None else ep.run_decompositions()
                        ml = ct.convert(decomposed, convert_to="mlprogram", compute_precision=precision,
                                        minimum_deployment_target=ct.target.iOS18)
                        break
                    except Exception:  # noqa: BLE001 — the next table, as xc tries it
                        if table is None:
                            raise
                ml._mil_program.functions["main"].operations
    return {"steps": steps}


# Vela's configuration per Ethos-U target, as xc's defaults: accelerator, system config, memory mode.
ETHOS_U_CONFIGS = {"executorch-ethos-u55": ("ethos-u55-128", "Ethos_U55_High_End_Embedded", "Shared_Sram"),
                   "executorch-ethos-u85": ("ethos-u85-256", "Ethos_U85_SYS_DRAM_Mid", "Sram_Only")}


def _bare_ethos_u(tid: str, ep, args: tuple, workdir: str) -> None:
    """ExecuTorch's Ethos-U flow by hand: PT2E int8, lowered with Vela writing its per-layer CSV, the .pte written,
    and the partitioned Edge program run once with its delegate answered by TOSA's reference model."""
    import csv

    import numpy as np
    import torch
    import tosa_reference_model
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
    from executorch.exir import to_edge_transform_and_lower
    from torch.overrides import TorchFunctionMode
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    target, system_config, memory_mode = ETHOS_U_CONFIGS[tid]
    spec = EthosUCompileSpec(target=target, system_config=system_config, memory_mode=memory_mode,
                             extra_flags=["--verbose-performance"])
    quantizer = EthosUQuantizer(spec)
    quantizer.set_global(get_symmetric_quantization_config())
    # check_guards=False: the Arm passes cannot trace the guard function export adds
    prepared = prepare_pt2e(ep.module(check_guards=False), quantizer)
    prepared(*args)                                          # calibration on the run's inputs
    quantized = torch.export.export(convert_pt2e(prepared), args)
    artifacts = os.path.join(workdir, f"{tid}-vela")
    spec.dump_intermediate_artifacts_to(artifacts)
    lowered = to_edge_transform_and_lower(quantized, partitioner=[EthosUPartitioner(spec)])
    edge = lowered.exported_program()
    delegates = [n for n in edge.graph.nodes if n.op == "get_attr" and n.name.startswith("lowered_module")]
    # One folder for every delegate: ExecuTorch overwrites it per delegate, so the hand-written flow holds for a
    # model lowered to one delegate only (xc keeps a folder per delegate).
    if len(delegates) != 1:
        raise SystemExit(f"{tid}: {len(delegates)} delegates; the bare Ethos-U flow reads one Vela output folder")
    with open(os.path.join(artifacts, "output", "out_per-layer.csv"), newline="") as f:
        list(csv.DictReader(f))
    with open(os.path.join(workdir, f"{tid}.pte"), "wb") as f:
        f.write(lowered.to_executorch().buffer)
    with open(os.path.join(artifacts, "out.tosa"), "rb") as f:
        tosa_program = f.read()

    class TosaReference(TorchFunctionMode):
        def __torch_function__(self, func, types, fargs=(), kwargs=None):
            if func is torch._higher_order_ops.executorch_call_delegate:
                outs, status = tosa_reference_model.run(
                    tosa_program, [a.detach().contiguous().numpy() for a in fargs[1:]], verbosity="LOW",
                    initialize_variable_tensor_from_numpy=True)
                if status != tosa_reference_model.GraphStatus.TOSA_VALID:
                    raise RuntimeError(f"TOSA's reference model refused the program ({status.name})")
                results = fargs[0].original_module.graph.output_node().args[0]
                return tuple(torch.from_numpy(np.array(o)).reshape(r.meta["val"].shape) for o, r in zip(outs, results))
            return func(*fargs, **(kwargs or {}))

    with torch.no_grad(), TosaReference():
        edge.module()(*args)


def _xc(model: str, targets: list[str], workdir: str, isolate: bool = True) -> dict:
    from xc_core.api import analyze
    from xc_core.targets import worker_modules
    from xc_core.worker import preload_only
    # Isolated, as the CLI runs it: up to one target per core at once, the workers' forkserver preloading what
    # these targets need (as `xc analyze` does); in process, one after another.
    preload_only(worker_modules(targets))
    report = analyze(model, targets, out_dir=os.path.join(workdir, "run"), isolate=isolate,
                     jobs=None if isolate else 1,
                     target_options={"openvino-cpu": {"inference_precision": "f32"}})
    steps = {"capture": sum((report.get("capture") or {}).get("timings", {}).values())}
    for identity, t in report["targets"].items():
        tid = identity.split("[", 1)[0]          # the bench's f32 pin is an option, not another target
        # stage views and the toolchain's calls are timed inside inspect and profile: not added twice
        steps[tid] = sum(v for k, v in t.get("timings", {}).items()
                         if k != "stage_views" and not k.endswith("_toolchain"))
        for k, v in t.get("timings", {}).items():
            steps[f"{tid}.{k}"] = v
    ref = report.get("reference") or {}
    steps["reference"] = sum((ref.get("timings") or {}).values())
    bad = {tid: t["error"] for tid, t in report["targets"].items() if t["status"] != "ok"}
    return {"steps": steps, "errors": bad}


def _one(kind: str, model: str, targets: list[str]) -> None:
    """Child mode: one measured run, its figures as one JSON line on stdout."""
    with tempfile.TemporaryDirectory(prefix="xc-overhead-") as workdir:
        t0, c0 = time.perf_counter(), _cpu()
        if kind == "bare":
            out = _bare(model, targets, workdir)
        else:
            out = _xc(model, targets, workdir, isolate=kind == "xc")
        out["wall"], out["cpu"] = time.perf_counter() - t0, _cpu() - c0
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out["peak_rss_mib"] = round(max(own, kids) / 1024, 1)
    print("XC-OVERHEAD " + json.dumps(out), flush=True)


def _cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


# ------------------------------------------------------------------------------------------------ driver
def _spawn(kind: str, model: str, targets: list[str]) -> dict:
    """One measured run in a fresh process; its own figures, plus the CPU time and peak memory of its whole process
    tree sampled from here (the isolated run's forkserver workers are not the child's waited-for children, so its
    own getrusage misses them). The tree's figures include the child's start (imports) on both sides."""
    from tree_cpu import run_sampled
    stdout, stderr, sampler = run_sampled([sys.executable, __file__, "--_one", kind, "--model", model, "--targets",
                                           ",".join(targets)], cwd=ROOT)
    line = next((x for x in stdout.splitlines() if x.startswith("XC-OVERHEAD ")), None)
    if line is None:
        raise SystemExit(f"{kind} run failed:\n{stderr[-3000:]}")
    out = json.loads(line.split(" ", 1)[1])
    out["tree_cpu"], out["tree_peak_rss_mib"] = sampler.cpu_seconds, sampler.peak_rss / 2**20
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="sample:vision-mini")
    ap.add_argument("--targets", default="ort-cpu,openvino-cpu,coreml-ane")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--_one", choices=KINDS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    targets = list(BARE_TARGETS) if args.targets == "all" else [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in BARE_TARGETS]
    if unknown:
        raise SystemExit(f"no bare baseline for {', '.join(unknown)}; this bench covers {', '.join(BARE_TARGETS)}")
    if args._one:
        _one(args._one, args.model, targets)
        return 0
    runs: dict[str, list[dict]] = {k: [] for k in KINDS}
    _spawn("bare", args.model, targets)                       # warm the page cache and compilers' caches
    for _ in range(args.repeat):
        for kind in KINDS:                                     # interleaved: all see the same machine load
            runs[kind].append(_spawn(kind, args.model, targets))
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall", "cpu", "peak_rss_mib", "tree_cpu",
                                                                "tree_peak_rss_mib")}
           for k, v in runs.items()}
    load = os.getloadavg()[0]
    print(f"{args.model} · targets {', '.join(targets)} · {args.repeat} runs each, interleaved, fresh processes · "
          f"load average {load:.1f} on {os.cpu_count()} cores at the end")
    # cpu: the measured child's own getrusage (its waited-for children included); tree_cpu: every process under it,
    # sampled (the isolated run's workers too). The goal for the whole tree's CPU is ≤ 1.10× the bare calls.
    for m, unit, kinds in (("wall", "s", ("xc-inproc", "xc")), ("cpu", "s", ("xc-inproc",)),
                           ("tree_cpu", "s", ("xc-inproc", "xc")), ("peak_rss_mib", "MiB", ("xc-inproc",)),
                           ("tree_peak_rss_mib", "MiB", ("xc-inproc", "xc"))):
        b = med["bare"][m]
        for kind in kinds:
            x = med[kind][m]
            print(f"  {m:13} bare {b:8.2f} {unit:3}  {kind:9} {x:8.2f} {unit:3}  ratio {x / b:5.2f}×  "
                  f"(runs: {', '.join(f'{r[m]:.1f}' for r in runs[kind])})")
    print("  per step (median seconds): step · bare · xc-inproc · xc")
    steps = sorted({s for v in runs.values() for r in v for s in r["steps"]},
                   key=lambda s: (s.split(".")[0] not in ("capture", "reference"), s))
    for s in steps:
        cells = []
        for kind in KINDS:
            vals = [r["steps"][s] for r in runs[kind] if s in r["steps"]]
            cells.append(f"{statistics.median(vals):9.2f}" if vals else "        —")
        print(f"    {s:28} " + " ".join(cells))
    # The time per node's own cost: the profiled runs each timing target makes after its compared run, against
    # the whole analysis in this process (one target after another, so the seconds add up), medians.
    inproc = runs["xc-inproc"]
    profiled = [sum(v for k, v in r["steps"].items() if k.endswith(".profile")) for r in inproc]
    if any(profiled):
        share = statistics.median(p / r["wall"] for p, r in zip(profiled, inproc))
        print(f"  profiled runs (time per node): {statistics.median(profiled):.2f} s of the in-process analysis's "
              f"{med['xc-inproc']['wall']:.2f} s = {100 * share:.1f}% (goal ≤ 10%); per target: "
              + ", ".join(f"{s.split('.')[0]} {statistics.median(r['steps'][s] for r in inproc):.2f} s"
                          for s in sorted({k for r in inproc for k in r['steps'] if k.endswith('.profile')})))
    errors = runs["xc"][-1].get("errors")
    if errors:
        print(f"  xc target errors: {errors}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
