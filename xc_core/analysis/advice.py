"""What a target's failure means for the user: whose limitation it is, the node or op it names, what to do.

A runtime's message says what went wrong in its own terms ("Unsupported fx node diff", "Could not find an
implementation for IsNaN(20) node with name 'n'", "killed by SIGSEGV in run"). The user needs three more things:
is it the model, the toolchain, xc or this machine's limits; which node; and what gets them past it. `advise`
answers from a table of known failures (each entry says where the behaviour is documented), then from the kind of
failure; the report carries the answer beside the error (`targets.<id>.advice`), and the CLI, the Overview and the
Markdown report show it.

Owners: "model" (the file is not what the format allows), "toolchain" (the compiler or runtime cannot do it),
"xc" (xc's own route or a bug in xc), "limits" (this run's time or memory bounds).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MODEL, TOOLCHAIN, XC, LIMITS = "model", "toolchain", "xc", "limits"

# Whose compiler each target family runs (by target id prefix).
TOOLCHAIN_OF = (("ort-", "ONNX Runtime"), ("coreml-", "coremltools / Core ML"), ("openvino-", "OpenVINO"),
                ("inductor-", "TorchInductor (torch.compile)"), ("torch", "PyTorch"),
                ("onnx-reference", "ONNX Runtime"), ("executorch-", "ExecuTorch"), ("coreai-", "coreai-torch / Core AI"),
                ("litert-", "LiteRT (litert-torch, ai-edge-litert)"), ("tflite-reference", "LiteRT"))


@dataclass(frozen=True)
class Known:
    pattern: re.Pattern
    owner: str
    who: str | None          # None: the target's own toolchain
    workaround: str
    op_group: int | None = None      # the pattern's group naming the op, if any
    node_group: int | None = None    # … and the node


_C = re.compile
# What the ONNX → PyTorch route's failures share: whose they are, and the way around them.
_ONNX_ROUTE = "xc's ONNX → PyTorch route"
_AS_PT2 = ("upload the model as a .pt2 (torch.export.save) for the targets that compile PyTorch programs, or analyse "
           "the ONNX targets only (--targets ort-cpu,openvino-cpu,…); the ONNX targets are unaffected")
# The route's refusals in its current words (xc_core/onnx_route/route.py, converters.py): the model never reached
# the targets' toolchains, so none of them is to blame.
_ROUTE_REFUSED = (r"no PyTorch program from the ONNX|onnx2torch c(?:ould|annot) convert|failed in PyTorch at the "
                  r"analysis shapes|opset-\d+ only, and xc cannot lower|preparing the graph for onnx2torch failed|"
                  r"torch\.export could not capture the traced|xc's converter does not compute this form|"
                  r"onnx2torch's converter does not compute this form|: its converter failed \(|"
                  r"the ONNX → PyTorch route did not run")
KNOWN = [
    # docs/architecture.md "Isolation": a worker's crash or limit is named by the parent
    Known(_C(r"^killed by SIG(SEGV|ABRT|BUS|ILL|FPE)"), TOOLCHAIN, None,
          "a native crash inside the compiler: the other targets are unaffected; the artifacts hold what it was "
          "given, for a report to its maintainers"),
    Known(_C(r"^exceeded [\d.]+ s"), LIMITS, "this run's time limit",
          "raise the time limit (CLI --timeout, dashboard: Worker limits), or analyse smaller inputs (--shape, --dim "
          "or the Inputs panel)"),
    Known(_C(r"exceeded the [\d.]+ GiB memory limit"), LIMITS, "this run's memory limit",
          "raise the memory limit (CLI --memory, dashboard: Worker limits), or analyse smaller inputs"),
    # torch.onnx: pytorch.org/docs/stable/onnx_export.html ("Exception summary" names the unsupported aten op)
    Known(_C(r"no ONNX to compile: torch\.onnx\.export failed.*?(?:for|function for) (aten[.:]+\w+(?:\.\w+)?)"),
          TOOLCHAIN, "torch.onnx (the ONNX exporter)",
          "export the ONNX yourself with the op rewritten or a custom translation (torch.onnx.export's "
          "custom_translation_table) and upload it; the targets that compile the ExportedProgram ran", op_group=1),
    Known(_C(r"no ONNX to compile: torch\.onnx\.export failed"), TOOLCHAIN, "torch.onnx (the ONNX exporter)",
          "export the ONNX yourself and upload it; the targets that compile the ExportedProgram ran"),
    # onnx2torch's converter registry (github.com/ENOT-AutoDL/onnx2torch, "Supported operations") and xc's own
    # converters (xc_core/onnx_route/converters.py)
    Known(_C(r"no PyTorch converter for (\w+) \(domain"), XC, _ONNX_ROUTE, _AS_PT2, op_group=1),
    # onnx2torch's Conv/Pool converters take explicit pads only (auto_pad SAME_* raises NotImplementedError)
    Known(_C(r"\"?(SAME_UPPER|SAME_LOWER)\"? auto_pad is not implemented"), XC, _ONNX_ROUTE,
          "re-export the ONNX with explicit pads (auto_pad NOTSET; most exporters have a switch for it), or analyse "
          "the ONNX targets only (--targets ort-cpu,openvino-cpu,…), which are unaffected"),
    Known(_C(r"(?:onnx2torch c(?:ould|annot) convert|converter does not compute this form)[^\n]*?"
             r"is not (?:implemented|supported)"), XC, _ONNX_ROUTE,
          "re-export the ONNX without that attribute or form of the op (it names it), or upload a .pt2, or analyse "
          "the ONNX targets only; the ONNX targets are unaffected"),
    Known(_C(_ROUTE_REFUSED), XC, _ONNX_ROUTE, _AS_PT2),
    # coremltools: apple.github.io/coremltools/docs-guides/source/custom-conversion.html (composite operators)
    Known(_C(r"Unsupported fx node (\w+)|convert function for op '(\w+)' not implemented"), TOOLCHAIN,
          "coremltools (its PyTorch frontend)",
          "rewrite the op in the model with ops coremltools converts, or register a composite for it "
          "(coremltools' @register_torch_op); the other targets are unaffected", op_group=1),
    # onnxruntime: the CPU EP's kernel registry is per op, opset and type (onnxruntime/docs/OperatorKernels.md)
    Known(_C(r"Could not find an implementation for (\w+)\(\d+\) node with name '([^']*)'"), TOOLCHAIN,
          "ONNX Runtime (no CPU kernel for this op at these types)",
          "cast the op's inputs to a type the CPU EP implements, or export at another opset", op_group=1,
          node_group=2),
    Known(_C(r"Expected (\S+) to be an initializer"), TOOLCHAIN, "ONNX Runtime's quantize_dynamic",
          "fold computed weights first (onnxruntime.quantization.quant_pre_process), as ORT's quantization docs "
          "advise", node_group=1),
    # OpenVINO's ONNX frontend: docs.openvino.ai (Supported Operations, ONNX)
    Known(_C(r"OpConversionFailure|No conversion rule found for operations?:?\s*(\S+)?"), TOOLCHAIN,
          "OpenVINO (its ONNX frontend)",
          "OpenVINO has no conversion for an op of this graph: rewrite it in the model, or compare on the other "
          "targets", op_group=1),
    Known(_C(r"CppCompileError|InvalidCxxCompiler|g\+\+"), TOOLCHAIN, "TorchInductor's C++ compiler (g++)",
          "check that g++ is installed (apt-get install g++); the other targets are unaffected"),
    # ExecuTorch's Edge dialect takes Core ATen ops only (pytorch.org/docs/stable/torch.compiler_ir.html)
    Known(_C(r"Operator torch\._ops\.(aten\.\w+(?:\.\w+)?) is not in Core ATen opset"), TOOLCHAIN,
          "ExecuTorch (to_edge: the Edge dialect takes Core ATen ops only)",
          "rewrite the op in the model with Core ATen ops (or give to_edge a decomposition for it); the other "
          "targets are unaffected", op_group=1),
    Known(_C(r"ExecuTorch's runtime on this host has no kernel for ([\w:.]+)"), TOOLCHAIN,
          "ExecuTorch's runtime (its CPU kernel library)",
          "the op runs outside every delegate and this runtime build has no kernel for it: build ExecuTorch with "
          "that kernel (a custom or selective kernel build), or change the op so the delegate takes it",
          op_group=1),
    # xc's own MIL interpreter (xc_core/emulate/mil_interpreter.py): the program compiled; only xc's emulation of
    # it on this host (which cannot run Core ML) stopped at this op, so coremltools is not to blame.
    Known(_C(r"cannot emulate op (\w+)"), XC, "xc's Core ML emulator (MIL interpreter)",
          "the compile, the predicted compute units and the precision stand; only this target's numerics are "
          "missing here: run the .mlpackage (Downloads) with Core ML on a Mac, or report the op to xc",
          op_group=1),
    Known(_C(r"refused: .*plain identifier"), XC, "xc's guard on names reaching generated code",
          "the model's names cannot be made safe for this route; the ONNX targets are unaffected"),
]

_NODE = _C(r"node '([^']+)'|node with name '([^']+)'|Name:'([^']+)'|node \"([^\"]+)\"")
_OP = _C(r"\b(aten\.\w+(?:\.\w+)?)|\bop '(\w+)'")
# Python's own errors from xc's code are xc's bugs, not the compiler's.
_XC_FRAME = _C(r'File "[^"]*/xc_core/[^"]+", line \d+')
_PY_BUGS = ("KeyError", "TypeError", "AttributeError", "IndexError", "NameError", "UnboundLocalError",
            "AssertionError", "ZeroDivisionError")


def toolchain_of(target_id: str) -> str:
    base = target_id.split("[", 1)[0]
    return next((name for prefix, name in TOOLCHAIN_OF if base.startswith(prefix)), base)


def advise(target_id: str, error: str | None, traceback: str | None = None, detail: str | None = None) -> dict | None:
    """{owner, who, node, op, workaround} for a failed target's error (None without one). `detail` is the runtime's
    whole message, `traceback` Python's, when the report has them."""
    if not error:
        return None
    text = f"{error}\n{detail or ''}"
    for k in KNOWN:
        m = k.pattern.search(text)
        if m:
            op = _group(m, k.op_group) if k.op_group else None
            if k.op_group == 1 and op is None and m.lastindex and m.lastindex > 1:
                op = next((g for g in m.groups() if g), None)      # alternatives name the op in another group
            node = _group(m, k.node_group) if k.node_group else _first(_NODE, text)
            return {"owner": k.owner, "who": k.who or toolchain_of(target_id), "node": node,
                    "op": op or _first(_OP, text), "workaround": k.workaround}
    if _is_xc_bug(error, traceback):
        return {"owner": XC, "who": "xc (a bug)", "node": _first(_NODE, text), "op": None,
                "workaround": "a bug in xc, not in your model: the other targets are unaffected; please report it "
                              "with the report.json (its traceback names the line)"}
    return {"owner": TOOLCHAIN, "who": toolchain_of(target_id), "node": _first(_NODE, text),
            "op": _first(_OP, text), "workaround": None}


def advice_line(advice: dict | None) -> str:
    """The advice in one line: whose · node / op · what to do."""
    if not advice:
        return ""
    where = ", ".join(x for x in (f"node '{advice['node']}'" if advice.get("node") else "",
                                  f"op {advice['op']}" if advice.get("op") else "") if x)
    parts = [f"whose: {advice['who']} ({OWNER_WORDS.get(advice['owner'], advice['owner'])})"]
    if where:
        parts.append(where)
    if advice.get("workaround"):
        parts.append(f"what to do: {advice['workaround']}")
    return " · ".join(parts)


OWNER_WORDS = {MODEL: "the model", TOOLCHAIN: "a toolchain limitation", XC: "xc's limitation",
               LIMITS: "a limit of this run"}


def _group(m, i):
    try:
        return m.group(i)
    except IndexError:
        return None


def _first(pattern, text: str) -> str | None:
    m = pattern.search(text)
    return next((g for g in m.groups() if g), None) if m else None


def _is_xc_bug(error: str, traceback: str | None) -> bool:
    words = error.split(": ", 2)
    named = any(w.strip().startswith(_PY_BUGS) for w in words[:2])
    if not named or not traceback:
        return False
    frames = [ln for ln in traceback.splitlines() if ln.strip().startswith("File ")]
    return bool(frames) and bool(_XC_FRAME.search(frames[-1]))
