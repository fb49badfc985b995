"""What a repro bundle (culprit/repro.py) holds for people without xc: `run_repro.py`, a short script that runs the
culprit sub-model with the plain toolchain of one target, and `BUG_REPORT.md`, the text to file with its maintainers.

A script is assembled from fixed text only. Nothing the model controls (op names, tensor names, file names from the
model) is pasted into it: it reads the names it needs from io.json, the arrays from the .npz files beside it, at
run time, as data. A target option that changes the compile picks one of a few fixed literals (validated first by
the target's own option check); every other value stays out of the script.

Each script prints, per output, the rel L2 (np.linalg.norm(got - ref) / np.linalg.norm(ref)) against the fp32
PyTorch reference (expected.npz) and against what the target gave when xc ran it (observed.npz), "non-finite" when
the toolchain's value has NaN or ±inf, and ends with a one-line summary.
"""
from __future__ import annotations

import platform
import re
from importlib.metadata import PackageNotFoundError, metadata, version

from ..errors import XcInputError, printable_line
from ..md_escape import markdown_plain

# --- the parts every script shares -----------------------------------------------------------------------------------

_HEAD = '''\
"""{title}

{how}
Needs only {needs} and numpy; reads the files beside it (io.json, inputs.npz, expected.npz, observed.npz{files}).
Run it from anywhere: python run_repro.py
"""
import json
import os
{stdlib}
import numpy as np
{imports}

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "io.json")) as f:
    IO = json.load(f)           # input and output names: data, read here, never code
inputs = np.load(os.path.join(HERE, "inputs.npz"))
feeds = [inputs[name] for name in IO["inputs"]]       # the sub-model's inputs in order (in_0, in_1, ...)
'''

_TAIL = '''
# --- how far the toolchain's outputs are from the fp32 reference, and from what xc observed ---
expected = np.load(os.path.join(HERE, "expected.npz"))
observed = np.load(os.path.join(HERE, "observed.npz"))


def flat(a):
    return np.asarray(a, dtype=np.float64).ravel()


def rel_l2(got, ref):
    """np.linalg.norm(got - ref) / np.linalg.norm(ref), as text; "non-finite" when got holds NaN or inf."""
    got, ref = flat(got), flat(ref)
    if got.size != ref.size:
        return f"not comparable ({got.size} values where {ref.size} are expected)"
    if not np.isfinite(got).all():
        return f"non-finite ({int((~np.isfinite(got)).sum())} of {got.size} values)"
    if not np.isfinite(ref).all():
        return "not comparable (the values compared against are non-finite)"
    norm, diff = np.linalg.norm(ref), np.linalg.norm(got - ref)
    return f"{diff / norm:.3e}" if norm else f"{diff:.3e} (absolute: all zeros expected)"


def same(got, ref):
    """NaN and inf where ref has them, and within 1e-3 rel L2 of it elsewhere."""
    got, ref = flat(got), flat(ref)
    if got.size != ref.size:
        return False
    finite = np.isfinite(got)
    if not np.array_equal(finite, np.isfinite(ref)) or not np.array_equal(got[~finite], ref[~finite], equal_nan=True):
        return False
    norm = np.linalg.norm(ref[finite])
    return bool(np.linalg.norm(got[finite] - ref[finite]) <= 1e-3 * norm) if norm else bool((got == ref)[finite].all())


worst, worst_at, non_finite, matching = None, None, 0, 0
for k, name in enumerate(IO["outputs"]):
    if k >= len(outputs):
        print(f"out_{k}: the toolchain returned no value")
        continue
    got = np.asarray(outputs[k])
    vs_expected = rel_l2(got, expected[name])
    line = f"out_{k}: rel L2 vs expected {vs_expected}"
    if vs_expected.startswith("non-finite"):
        non_finite += 1
    elif flat(got).size == flat(expected[name]).size:
        line += f" (max abs diff {np.abs(flat(got) - flat(expected[name])).max(initial=0.0):.3e})"
        if not vs_expected.startswith("not") and (worst is None or float(vs_expected.split()[0]) > worst):
            worst, worst_at = float(vs_expected.split()[0]), k
    if name in observed.files:
        line += f"; vs observed {rel_l2(got, observed[name])}"
        matching += same(got, observed[name])
    else:
        line += "; nothing observed by xc for it"
    print(line)
n = len(IO["outputs"])
print(f"summary: {n} output(s), {non_finite} non-finite"
      + (f"; worst rel L2 vs expected {worst:.3e} (out_{worst_at})" if worst is not None else "")
      + f"; {matching} of {n} match what xc observed (same NaN/inf, within 1e-3 rel L2)")
'''

# --- per target: what it needs and the lines that give `outputs` (a list, in io.json's "outputs" order) -------------

_RUN_ONNX = '''
def run_onnx(session):
    """Feeds by position (the ONNX inputs are in_0, in_1, ...); outputs in io.json's onnx_outputs order."""
    given = {i.name: feed for i, feed in zip(session.get_inputs(), feeds)}
    return session.run(IO.get("onnx_outputs") or [o.name for o in session.get_outputs()], given)


'''

# ORT's graph optimization levels by xc's option values (ort-cpu's `level`).
_ORT_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
               "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}


def _ort_cpu(s) -> dict:
    level = _ORT_LEVELS[s.level]
    return {"title": f"ONNX Runtime, CPU execution provider, {level}: the sub-model xc found drifting.",
            "how": "model.onnx is what xc gave ONNX Runtime (exported by torch.onnx from model.pt2).",
            "needs": "onnxruntime", "files": ", model.onnx",
            "imports": "import onnxruntime as ort",
            "body": _RUN_ONNX + f'''options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.{level}
session = ort.InferenceSession(os.path.join(HERE, "model.onnx"), options, providers=["CPUExecutionProvider"])
outputs = run_onnx(session)
'''}


_QUANT_TYPES = {"QInt8": "QInt8", "QUInt8": "QUInt8"}


def _ort_int8(s) -> dict:
    level, weight_type, per_channel = _ORT_LEVELS[s.level], _QUANT_TYPES[s.weight_type], bool(s.per_channel)
    return {"title": f"ONNX Runtime dynamic int8 quantization (quantize_dynamic, weight_type={weight_type}, "
                     f"per_channel={per_channel}), then the CPU execution provider at {level}.",
            "how": "model.onnx is the float model xc quantized (compiled/model.int8.onnx is xc's quantized copy).",
            "needs": "onnxruntime", "files": ", model.onnx",
            "stdlib": ("tempfile",),
            "imports": ("import onnxruntime as ort\nfrom onnxruntime.quantization import QuantType, quantize_dynamic\n"
                        "from onnxruntime.quantization.shape_inference import quant_pre_process"),
            "body": _RUN_ONNX + f'''with tempfile.TemporaryDirectory() as tmp:
    source, quantized = os.path.join(HERE, "model.onnx"), os.path.join(tmp, "model.int8.onnx")
    try:
        quantize_dynamic(source, quantized, weight_type=QuantType.{weight_type}, per_channel={per_channel})
    except ValueError as e:
        if "to be an initializer" not in str(e):
            raise
        # a weight computed in the graph: ORT's documented pre-processing folds it to a constant first
        quant_pre_process(source, os.path.join(tmp, "model.pre.onnx"))
        quantize_dynamic(os.path.join(tmp, "model.pre.onnx"), quantized, weight_type=QuantType.{weight_type},
                         per_channel={per_channel})
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.{level}
    session = ort.InferenceSession(quantized, options, providers=["CPUExecutionProvider"])
    outputs = run_onnx(session)
'''}


_MOBILE_EPS = {"ort-coreml": "CoreML execution provider", "ort-nnapi": "NNAPI execution provider"}


def _ort_mobile(target_id: str):
    ep = _MOBILE_EPS[target_id]

    def build(s) -> dict:
        if not s.fp16:
            return {"title": f"ONNX Runtime, CPU execution provider at ORT_ENABLE_ALL: the numbers xc gives for the "
                             f"{ep} with fp16 emulation off.",
                    "how": f"This host has no {ep}: these are the CPU EP's numbers for model.onnx, not the EP's.",
                    "needs": "onnxruntime", "files": ", model.onnx",
                    "imports": "import onnxruntime as ort",
                    "body": _RUN_ONNX + '''options = ort.SessionOptions()
options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
session = ort.InferenceSession(os.path.join(HERE, "model.onnx"), options, providers=["CPUExecutionProvider"])
outputs = run_onnx(session)
'''}
        return {"title": f"An fp16 emulation of ONNX Runtime's {ep}, run on ORT's CPU execution provider.",
                "how": (f"This is an EMULATION of the {ep}, which this host does not have: xc converted the nodes "
                        "ORT's partition checker\n(onnxruntime.tools.mobile_helpers) gives the EP to fp16 with "
                        "onnxconverter-common, left the others in fp32, and ran that model\n(compiled/model.fp16-"
                        "emulation.*.onnx) on the CPU EP with graph optimizations off, as below. On a device the "
                        "EP's own fp16\nkernels may round differently."),
                "needs": "onnxruntime", "files": ", model.onnx, compiled/",
                "imports": "import onnxruntime as ort",
                "body": _RUN_ONNX + '''EMULATIONS = ("model.fp16-emulation.converted.onnx", "model.fp16-emulation.converted-partly.onnx",
              "model.fp16-emulation.rounded.onnx")    # xc's rungs, best first: the one it ran is in compiled/
found = [os.path.join(HERE, "compiled", e) for e in EMULATIONS if os.path.isfile(os.path.join(HERE, "compiled", e))]
options = ort.SessionOptions()
if found:
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(found[0], options, providers=["CPUExecutionProvider"])
else:   # the checker gave the EP no node: every node on the CPU EP, in fp32
    print("no fp16 emulation model: the EP takes no node of this sub-model; running model.onnx in fp32")
    session = ort.InferenceSession(os.path.join(HERE, "model.onnx"), options, providers=["CPUExecutionProvider"])
outputs = run_onnx(session)
'''}
    return build


_OV_PRECISIONS = {"f32": "f32", "bf16": "bf16", "f16": "f16"}
_OV_HINTS = {"LATENCY": "LATENCY", "THROUGHPUT": "THROUGHPUT"}


def _openvino(s) -> dict:
    config = {}
    if s.inference_precision is not None:
        config["INFERENCE_PRECISION_HINT"] = _OV_PRECISIONS[s.inference_precision]
    if s.performance_hint is not None:
        config["PERFORMANCE_HINT"] = _OV_HINTS[s.performance_hint]
    said = ", ".join(f"{k}={v}" for k, v in config.items()) or "the plugin's default configuration"
    return {"title": f"OpenVINO, CPU plugin ({said}): the sub-model xc found drifting.",
            "how": "model.onnx is what xc gave OpenVINO (exported by torch.onnx from model.pt2).",
            "needs": "openvino", "files": ", model.onnx",
            "imports": "import openvino as ov",
            "body": f'''core = ov.Core()
compiled = core.compile_model(core.read_model(os.path.join(HERE, "model.onnx")), "CPU", {config!r})
results = compiled(feeds)      # by position: the ONNX inputs are in_0, in_1, ...
outputs = [results[port] for port in compiled.outputs]      # OpenVINO keeps the ONNX output order
'''}


_INDUCTOR_MODES = {"default": None, "max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs"}


def _inductor(s) -> dict:
    mode = _INDUCTOR_MODES[s.mode]
    return {"title": "PyTorch torch.compile (TorchInductor) on the CPU"
                     + (f", mode={mode}" if mode else ", default mode") + ": the sub-model xc found drifting.",
            "how": "model.pt2 is the sub-program (torch.export); compiled/ holds the code Inductor generated for xc.",
            "needs": "torch", "files": ", model.pt2",
            "imports": "import torch\nfrom torch.utils._pytree import tree_leaves",
            "body": f'''program = torch.export.load(os.path.join(HERE, "model.pt2"))
compiled = torch.compile(program.module(), backend="inductor", mode={mode!r})
with torch.no_grad():
    result = compiled(*[torch.from_numpy(np.array(a, order="C")) for a in feeds])
outputs = [t.detach().numpy() for t in tree_leaves(result) if isinstance(t, torch.Tensor)]
'''}


_PTE_IMPORTS = "import torch\nfrom executorch.runtime import Runtime\nfrom torch.utils._pytree import tree_leaves"
_RUN_PTE = '''method = Runtime.get().load_program(os.path.join(HERE, "compiled", "model.pte")).load_method("forward")
result = method.execute([torch.from_numpy(np.array(a, order="C")) for a in feeds])
outputs = [t.detach().numpy() for t in tree_leaves(result) if isinstance(t, torch.Tensor)]
'''


def _executorch_xnnpack(s) -> dict:
    if s.quantize == "int8":
        made = ("model.pt2 PT2E-quantized (XNNPACKQuantizer, symmetric per-channel, calibrated on inputs.npz), "
                "then lowered")
    else:
        made = "model.pt2 lowered"
    return {"title": "ExecuTorch with the XNNPACK delegate: the .pte xc lowered, run by ExecuTorch's runtime.",
            "how": (f"compiled/model.pte is {made} with to_edge_transform_and_lower(XnnpackPartitioner) and "
                    "to_executorch; ops outside\nthe delegates run on ExecuTorch's portable CPU kernels."),
            "needs": "executorch (and torch)", "files": ", compiled/model.pte", "imports": _PTE_IMPORTS,
            "body": _RUN_PTE}


_CT_PRECISIONS = {"fp16": "FLOAT16", "fp32": "FLOAT32"}
_CT_UNITS = {u: u for u in ("ALL", "CPU_AND_NE", "CPU_AND_GPU", "CPU_ONLY")}


def _needs_macos(done: str) -> str:
    return f'''if sys.platform != "darwin":
    print("{done}; Core ML prediction needs macOS (Core ML runs only there): run this script on a Mac for the numbers")
    sys.exit(0)
'''


def _coreml(s) -> dict:
    precision, units = _CT_PRECISIONS[s.precision], _CT_UNITS[s.compute_units]
    deployment = _deployment_target(s.minimum_deployment_target)
    return {"title": f"coremltools ML program ({precision}, compute units {units}, {deployment}): the sub-model "
                     "xc found drifting.",
            "how": ("Converts model.pt2 as xc does (compiled/model.mlpackage is xc's conversion), then predicts with "
                    "Core ML on macOS.\nOn other systems it stops after converting: xc's numbers there come from its "
                    "own emulation of the ML program."),
            "needs": "coremltools (and torch)", "files": ", model.pt2",
            "stdlib": ("sys",), "imports": "import coremltools as ct\nimport torch",
            "body": f'''program = torch.export.load(os.path.join(HERE, "model.pt2"))
try:
    program = program.run_decompositions({{}})
except Exception:   # xc takes the default decomposition table when the empty one fails
    program = program.run_decompositions()
mlmodel = ct.convert(program, convert_to="mlprogram", compute_precision=ct.precision.{precision},
                     compute_units=ct.ComputeUnit.{units}, minimum_deployment_target=ct.target.{deployment})
{_needs_macos("converted")}description = mlmodel.get_spec().description
result = mlmodel.predict({{i.name: np.array(a, order="C") for i, a in zip(description.input, feeds)}})
outputs = [result[o.name] for o in description.output]
'''}


def _deployment_target(value: str) -> str:
    from ..targets.coreml import CoreMLOptions
    import typing
    allowed = typing.get_args(typing.get_type_hints(CoreMLOptions)["minimum_deployment_target"])
    if value not in allowed or not value.isalnum():
        raise XcInputError(f"minimum_deployment_target {printable_line(value)!r}: accepted {', '.join(allowed)}")
    return value


def _executorch_coreml(s) -> dict:
    precision = _CT_PRECISIONS[s.precision]
    return {"title": f"ExecuTorch with the Core ML delegate (compute precision {precision}).",
            "how": ("Lowers model.pt2 as xc did (to_edge_transform_and_lower with CoreMLPartitioner; compiled/model.pte "
                    "is xc's .pte),\nthen runs the .pte with ExecuTorch's runtime on macOS. On other systems it "
                    "stops after lowering: the Core ML\ndelegate runs only on Apple's OSes, and xc's numbers there "
                    "come from its own emulation of each delegate's ML program."),
            "needs": "executorch, coremltools (and torch)", "files": ", model.pt2",
            "stdlib": ("sys",),
            "imports": ("import coremltools as ct\nimport torch\n"
                        "from executorch.backends.apple.coreml.compiler import CoreMLBackend\n"
                        "from executorch.backends.apple.coreml.partition import CoreMLPartitioner\n"
                        "from executorch.exir import to_edge_transform_and_lower\n"
                        "from torch.utils._pytree import tree_leaves"),
            "body": f'''program = torch.export.load(os.path.join(HERE, "model.pt2"))
specs = CoreMLBackend.generate_compile_specs(compute_precision=ct.precision.{precision})
pte = to_edge_transform_and_lower(program, partitioner=[CoreMLPartitioner(compile_specs=specs)]).to_executorch()
{_needs_macos("lowered")}from executorch.runtime import Runtime    # its Core ML delegate is built on macOS only

method = Runtime.get().load_program(pte.buffer).load_method("forward")
result = method.execute([torch.from_numpy(np.array(a, order="C")) for a in feeds])
outputs = [t.detach().numpy() for t in tree_leaves(result) if isinstance(t, torch.Tensor)]
'''}


_TFLITE_FILES = {"none": "model.tflite", "int8": "model_int8.tflite"}


def _litert_xnnpack(s) -> dict:
    tflite = _TFLITE_FILES[s.quantize]
    made = ("converted by litert-torch, then ai-edge-quantizer's dynamic-range recipe (int8 weights)"
            if s.quantize == "int8" else "converted by litert-torch")
    return {"title": "LiteRT's interpreter with its default delegate, XNNPACK: the .tflite xc ran.",
            "how": f"compiled/{tflite} is model.pt2 {made}.",
            "needs": "ai-edge-litert", "files": f", compiled/{tflite}",
            "imports": "from ai_edge_litert.interpreter import Interpreter",
            "body": f'''def position(key):
    """litert-torch names signature inputs args_0, args_1, ... and outputs output_0, ...: in order by number."""
    digits = key[len(key.rstrip("0123456789")):]
    return (int(digits) if digits else 1 << 30, key)


# No options: what an app gets, XNNPACK for the ops it takes, LiteRT's built-in kernels for the rest.
interpreter = Interpreter(model_path=os.path.join(HERE, "compiled", {tflite!r}))
if interpreter.get_signature_list():
    runner = interpreter.get_signature_runner()
    details = runner.get_input_details()
    keys = sorted(details, key=position)
    result = runner(**{{k: np.asarray(a, dtype=details[k]["dtype"]) for k, a in zip(keys, feeds)}})
    outputs = [result[k] for k in sorted(result, key=position)]
else:   # no signature: the subgraph's own input and output order
    interpreter.allocate_tensors()
    for d, a in zip(interpreter.get_input_details(), feeds):
        interpreter.set_tensor(d["index"], np.asarray(a, dtype=d["dtype"]))
    interpreter.invoke()
    outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
'''}


def _coreai(target_id: str):
    def build(s) -> dict:
        if target_id == "coreai-ane":
            made = ("model.pt2 made float16 by xc (weights and activations, as Core ML's FLOAT16 compute precision "
                    "makes a program),\nthen converted by coreai-torch. The Neural Engine is not here: the fp16 "
                    "program runs on this CPU, as xc ran it.")
        else:
            made = "model.pt2 converted by coreai-torch (fp32)."
        return {"title": "Core AI: the .aimodel xc converted, run by Core AI's runtime.",
                "how": f"compiled/model.aimodel is {made}",
                "needs": "coreai-core (its runtime)", "files": ", compiled/model.aimodel",
                "stdlib": ("asyncio",),
                "imports": "from coreai.authoring import AIModelAsset\nfrom coreai.runtime import NDArray",
                "body": '''async def run():
    # On Linux, executable() lowers the asset to ODIX for this CPU; on macOS the OS runtime loads it.
    async with AIModelAsset.load(os.path.join(HERE, "compiled", "model.aimodel")).executable() as model:
        function = model.load_function("main")
        names = function.desc.input_names
        given = {name: NDArray(np.array(a, order="C").astype(function.desc.input_descriptor(name).dtype))
                 for name, a in zip(names, feeds)}
        result = await function(given)
        return [result[name].numpy() for name in function.desc.output_names]


outputs = asyncio.run(run())
'''}
    return build


_BUILDERS = {
    "ort-cpu": _ort_cpu,
    "ort-cpu-int8": _ort_int8,
    "ort-coreml": _ort_mobile("ort-coreml"),
    "ort-nnapi": _ort_mobile("ort-nnapi"),
    "openvino-cpu": _openvino,
    "inductor-cpu": _inductor,
    "executorch-xnnpack": _executorch_xnnpack,
    "executorch-coreml": _executorch_coreml,
    "litert-xnnpack": _litert_xnnpack,
    "coreml-ane": _coreml,
    "coreml-cpu": _coreml,
    "coreai-cpu": _coreai("coreai-cpu"),
    "coreai-ane": _coreai("coreai-ane"),
}

_NO_SCRIPT = {
    "litert-gpu": ("LiteRT's GPU delegate runs here only inside xc's headless Chromium on SwiftShader (a software "
                   "Vulkan GPU); run compiled/model.tflite with the GPU delegate on a device instead"),
    "executorch-vulkan": "no Vulkan GPU here: xc reports the Vulkan partitioner's decisions and does not run the .pte",
    "executorch-ethos-u55": ("the Ethos-U55's command stream runs only on the NPU or Arm's Corstone FVP; xc's "
                             "numbers come from TOSA's reference model"),
    "executorch-ethos-u85": ("the Ethos-U85's command stream runs only on the NPU or Arm's Corstone FVP; xc's "
                             "numbers come from TOSA's reference model"),
    "torch": "a reference, not a toolchain under test",
    "onnx-reference": "a reference, not a toolchain under test",
    "tflite-reference": "a reference, not a toolchain under test",
}


def _target_and_settings(target_id: str, options: dict):
    """(base id, the target's typed settings): options checked by the target itself, defaults filled in."""
    from ..targets import REGISTRY, target_ids
    from ..targets.options import split_spec
    base, given = split_spec(target_id)
    if base not in REGISTRY:
        raise XcInputError(f"unknown target '{printable_line(base)}'; accepted: {', '.join(target_ids())}")
    cls = REGISTRY[base]
    checked = cls.check_options({**given, **(options or {})}, where=f"target '{printable_line(target_id)}'")
    return base, cls(**checked).settings


def script_for(target_id: str, options: dict) -> str | None:
    """The text of run_repro.py for `target_id` with `options`, or None where no standalone run is possible here
    (`no_script_reason` says why)."""
    base, settings = _target_and_settings(target_id, options)
    build = _BUILDERS.get(base)
    if build is None:
        return None
    parts = build(settings)
    head = _HEAD.format(stdlib="".join(f"import {m}\n" for m in parts.get("stdlib", ())),
                        imports=parts["imports"], **{k: parts[k] for k in ("title", "how", "needs", "files")})
    return head + "\n" + parts["body"] + _TAIL


def no_script_reason(target_id: str) -> str | None:
    """Why `target_id` gets no run_repro.py (one line); None when it gets one."""
    from ..targets.options import split_spec
    base, _ = split_spec(target_id)
    if base in _BUILDERS:
        return None
    return _NO_SCRIPT.get(base, f"no standalone script for {printable_line(base)}")


# --- where each toolchain takes bug reports, and what to say about versions -------------------------------------------

_ORT = ("ONNX Runtime", "https://github.com/microsoft/onnxruntime/issues")
_EXECUTORCH = ("ExecuTorch", "https://github.com/pytorch/executorch/issues")
_LITERT = ("LiteRT", "https://github.com/google-ai-edge/LiteRT/issues")
_COREMLTOOLS = ("coremltools", "https://github.com/apple/coremltools/issues")
# The "Issues" Project-URL of coreai-torch's wheel metadata (coreai-core's names no project page).
_COREAI = ("Core AI (coreai-torch, coreai-core)", "https://github.com/apple/coreai-torch/issues")
_TRACKERS = {
    "ort-cpu": _ORT, "ort-cpu-int8": _ORT, "ort-coreml": _ORT, "ort-nnapi": _ORT,
    "openvino-cpu": ("OpenVINO", "https://github.com/openvinotoolkit/openvino/issues"),
    "inductor-cpu": ("PyTorch Inductor (torch.compile; label the issue 'oncall: pt2')",
                     "https://github.com/pytorch/pytorch/issues"),
    "executorch-xnnpack": _EXECUTORCH, "executorch-coreml": _EXECUTORCH, "executorch-vulkan": _EXECUTORCH,
    "executorch-ethos-u55": _EXECUTORCH, "executorch-ethos-u85": _EXECUTORCH,
    "litert-xnnpack": _LITERT, "litert-gpu": _LITERT,
    "coreml-ane": _COREMLTOOLS, "coreml-cpu": _COREMLTOOLS,
    "coreai-cpu": _COREAI, "coreai-ane": _COREAI,
}

# The distributions whose versions decide what a target does, beside python and the platform.
_ONNX_EXPORT = ("torch", "onnx", "onnxscript")
_DISTRIBUTIONS = {
    "ort-cpu": ("onnxruntime", *_ONNX_EXPORT),
    "ort-cpu-int8": ("onnxruntime", *_ONNX_EXPORT),
    "ort-coreml": ("onnxruntime", "onnxconverter-common", *_ONNX_EXPORT),
    "ort-nnapi": ("onnxruntime", "onnxconverter-common", *_ONNX_EXPORT),
    "openvino-cpu": ("openvino", *_ONNX_EXPORT),
    "inductor-cpu": ("torch",),
    "executorch-xnnpack": ("executorch", "torch", "torchao"),
    "executorch-vulkan": ("executorch", "torch"),
    "executorch-coreml": ("executorch", "coremltools", "torch"),
    "executorch-ethos-u55": ("executorch", "ethos-u-vela", "torch"),
    "executorch-ethos-u85": ("executorch", "ethos-u-vela", "torch"),
    "litert-xnnpack": ("ai-edge-litert", "litert-torch", "ai-edge-quantizer", "torch"),
    "litert-gpu": ("ai-edge-litert", "litert-torch", "torch"),
    "coreml-ane": ("coremltools", "torch"),
    "coreml-cpu": ("coremltools", "torch"),
    "coreai-cpu": ("coreai-core", "coreai-torch", "torch"),
    "coreai-ane": ("coreai-core", "coreai-torch", "torch"),
}


def tracker_for(target_id: str) -> tuple[str, str]:
    """(toolchain, the public URL where it takes bug reports) for `target_id`."""
    from ..targets.options import split_spec
    base, _ = split_spec(target_id)
    if base not in _TRACKERS:
        raise XcInputError(f"no bug tracker known for target '{printable_line(base)}'; known: "
                           f"{', '.join(_TRACKERS)}")
    return _TRACKERS[base]


def toolchain_versions(target_id: str) -> dict[str, str]:
    """Installed versions of the distributions that matter for `target_id` (those not installed are left out),
    numpy, python and the platform."""
    from ..targets.options import split_spec
    base, _ = split_spec(target_id)
    out = {}
    for name in (*_DISTRIBUTIONS.get(base, ()), "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    out["python"] = platform.python_version()
    out["platform"] = platform.platform()
    return out


def project_issues_url(distribution: str) -> str | None:
    """The "Issues" Project-URL a distribution's metadata names (None when it names none)."""
    try:
        urls = metadata(distribution).get_all("Project-URL") or []
    except PackageNotFoundError:
        return None
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("issues", "issue tracker", "bug tracker"):
            return url.strip()
    return None


# --- BUG_REPORT.md -----------------------------------------------------------------------------------------------

MAX_OPS_LISTED = 20
_PIN = re.compile(r"[A-Za-z0-9._-]+==[A-Za-z0-9._+!-]+")     # what may go on the report's pip line as it is


def _md(value) -> str:
    """Untrusted text as one line of plain Markdown."""
    return markdown_plain(" ".join(str(value).split()))


def _figure(value) -> str:
    return "—" if value is None else f"{value:.3g}"


def _drift_row(label: str, figures: dict | None) -> str | None:
    if not figures:
        return None
    if figures.get("error"):
        return f"| {label} | failed: {_md(figures['error'])} | — |"
    if figures.get("non_finite"):
        return f"| {label} | non-finite | non-finite |"
    return f"| {label} | {_figure(figures.get('rel_l2'))} | {_figure(figures.get('max_abs'))} |"


def bug_report(io: dict, figures: dict, versions: dict, tracker: tuple[str, str], sentence: str) -> str:
    """BUG_REPORT.md: title, what happens (`sentence`, the culprit's line), the figures against the fp32
    reference, how to run the repro, the versions, where to file it. `figures`: "local" (the culprit ops' worst
    figures in isolation: rel_l2, max_abs, ..., non_finite), "window" (the model's output drift with the culprit on
    the target and the rest on the reference) and "baseline" (every op on the target) as culprit trials
    (rel_l2, non_finite, error), "explained" (the share of the drift the culprit accounts for); any may be absent.
    Every string from the model, the run or io.json is escaped for Markdown."""
    figures = figures or {}
    target = str(io.get("target") or "")
    identity = io.get("identity") or target
    ops = [str(o) for o in io.get("ops") or []]
    op_types = [str(t) for t in io.get("op_types") or [] if t]
    toolchain, url = tracker       # this module's own constants (tracker_for), not the model's
    kinds = ", ".join(_md(t) for t in dict.fromkeys(op_types)) or "ops"
    lines = [f"# {toolchain}: output drifts from the fp32 PyTorch reference on a {len(ops)}-op sub-model "
             f"({kinds})", ""]
    lines += ["## What happens", "", _md(sentence) if sentence else
              f"{_md(identity)}: this sub-model's output differs from PyTorch's fp32 output.", ""]
    if ops:
        listed = ", ".join(_md(o) for o in ops[:MAX_OPS_LISTED])
        more = f" and {len(ops) - MAX_OPS_LISTED} more" if len(ops) > MAX_OPS_LISTED else ""
        lines += [f"The sub-model computes {len(ops)} op(s) of the original model: {listed}{more}.", ""]
    options = io.get("options") or {}
    if options:
        lines += ["Target options: " + ", ".join(f"{_md(k)}={_md(v)}" for k, v in sorted(options.items())), ""]
    rows = [r for r in (
        _drift_row("the culprit ops alone on the target (their inputs from the reference)", figures.get("local")),
        _drift_row("model output, the culprit ops on the target, the rest fp32 PyTorch", figures.get("window")),
        _drift_row("model output, every op on the target", figures.get("baseline"))) if r]
    evidence = figures.get("evidence")      # how xc got the target's numbers: measured here, or emulated
    lines += ["## Figures (against the fp32 PyTorch reference)", ""]
    if evidence:
        lines += [f"Evidence: {_md(evidence)} (xc's kind for the target's numbers: `measured` ran the toolchain "
                  "here, `emulated` computed what the device would).", ""]
    if rows:
        lines += ["| where | rel L2 | max abs diff |", "|---|---|---|", *rows, ""]
    else:
        lines += ["No figures were recorded.", ""]
    explained = figures.get("explained")
    if isinstance(explained, (int, float)):
        lines += [f"The culprit accounts for {explained:.0%} of the output drift.", ""]
    lines += ["rel L2 is ‖target − reference‖₂ / ‖reference‖₂; *non-finite*: the target gives NaN or ±inf where the "
              "reference is finite.", ""]
    lines += ["## How to run it", ""]
    reason = no_script_reason(target) if target else "the target is not named"
    if reason is None:
        pins = [f"{k}=={v}" for k, v in versions.items()
                if k not in ("python", "platform") and _PIN.fullmatch(f"{k}=={v}")]
        lines += ["Only the toolchain below is needed (not xc). From this folder:", "", "```sh",
                  *([f"pip install {' '.join(pins)}"] if pins else []), "python run_repro.py", "```", "",
                  "It prints, per output, the rel L2 against `expected.npz` (the fp32 PyTorch reference) and against "
                  "`observed.npz` (what the target gave when xc ran it), and a summary line.", ""]
    else:
        lines += [f"No standalone script: {_md(reason)}.", ""]
    lines += ["Files: `model.pt2` (the sub-model, torch.export), `model.onnx` (what an ONNX toolchain was given, "
              "when there is one), `compiled/` (what the toolchain wrote compiling it), `inputs.npz`, "
              "`expected.npz`, `observed.npz`, `io.json` (input and output names in order).", ""]
    lines += ["## Versions", "", "| package | version |", "|---|---|",
              *(f"| {_md(k)} | {_md(v)} |" for k, v in versions.items()), ""]
    lines += ["## Where to file it", "", f"{toolchain}: <{url}>", ""]
    return "\n".join(lines)
