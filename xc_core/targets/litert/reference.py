"""`tflite-reference`: the reference for .tflite uploads — LiteRT's interpreter with its built-in kernels only (no
XNNPACK, no delegate: `OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES`), as `onnx-reference` is ONNX Runtime with
every optimization off.

Some .tflite files hold a custom op only a delegate provides: MediaPipe's segmentation models use
`Convolution2DTransposeBias`, which XNNPACK's delegate implements and LiteRT's built-in resolver does not ("Encountered
unresolved custom op"). Such a model has no delegate-free run at all, so the reference is then LiteRT's interpreter
with its default delegate, XNNPACK — the way `litert-xnnpack` runs it. The report says so (`reference.ran_with`),
and `litert-xnnpack`'s drift against it is marked not informative: it compares XNNPACK with itself."""
from __future__ import annotations

from ... import evidence as ev
from ..base import register
from .common import CPU_KERNELS, LiteRTTarget, interpreter, run_interpreter, set_precisions

# TFLite's words when its op resolver has no kernel for a custom op (tflite/core/subgraph.cc, "Encountered
# unresolved custom op"): the one failure a delegate can cure.
UNRESOLVED_CUSTOM_OP = "unresolved custom op"
DELEGATE = "XNNPACK"
# Targets that run the .tflite on the same delegate the fallback reference uses: their drift compares it with itself.
SAME_RUNTIME_TARGETS = ("litert-xnnpack",)


def needs_delegate(error: BaseException) -> bool:
    """Whether the built-in kernels failed only for want of a custom op a delegate may provide."""
    return isinstance(error, (RuntimeError, ValueError)) and UNRESOLVED_CUSTOM_OP in str(error)


def reference_interpreter(path: str):
    """(interpreter, None) with the built-in kernels; (interpreter with XNNPACK, why) when the built-in kernels
    cannot resolve a custom op and the delegate can. Any other failure of the built-in kernels is raised as it is;
    a custom op the delegate lacks too is raised in one line naming both."""
    try:
        return interpreter(path, delegates=False), None
    except Exception as e:  # noqa: BLE001 — decided below: only an unresolved custom op is retried
        if not needs_delegate(e):
            raise
        first = e
    why = " ".join(str(first).split())[:200]
    try:
        return interpreter(path, delegates=True), why
    except Exception:  # noqa: BLE001 — the delegate does not provide it either: said as the model's own limit
        raise RuntimeError(f"neither LiteRT's built-in kernels nor its {DELEGATE} delegate provide a custom op of the "
                           f"model ({why}); the app that ships it registers its own kernel") from None


@register
class TfliteReference(LiteRTTarget):
    id = "tflite-reference"
    label = "LiteRT built-in kernels, no delegate (reference)"
    description = "LiteRT's interpreter without delegates: the reference for .tflite sources"
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED}
    is_reference = True
    from_exported_program = False
    takes_program = False
    relative_cost = 1

    def accepts(self, captured):
        if not captured.tflite_path:
            return False, "the LiteRT reference runs .tflite sources"
        return True, ""

    def _compile(self, captured, workdir, result):
        compiled = super()._compile(captured, workdir, result)
        from ...quiet import quiet_litert
        with quiet_litert():
            it, why = reference_interpreter(compiled.tflite_path)
        compiled.extra["interpreter"] = it
        if why:
            result.info["ran_with"] = {
                "delegate": DELEGATE, "why": why, "same_runtime_as": list(SAME_RUNTIME_TARGETS),
                "text": f"LiteRT's built-in kernels cannot run this model ({why}); the reference ran with the "
                        f"{DELEGATE} delegate, as litert-xnnpack does — not an independent reference for it"}
            result.notes.append(result.info["ran_with"]["text"])
            result.numerics_assumption = (f"LiteRT's interpreter with its default delegate ({DELEGATE}): the model "
                                          "has a custom op only the delegate provides")
        return compiled

    def _inspect(self, compiled, captured, result):
        g = self.converted_graph(compiled, captured, "tflite")
        delegated = "ran_with" in result.info
        for n in g.nodes:
            n.backend, n.kernel = "cpu", CPU_KERNELS
            if delegated and n.attributes.get("custom_op"):
                n.backend, n.kernel = "xnnpack", f"{DELEGATE} delegate (the built-in kernels lack this custom op)"
        set_precisions(g)
        result.input_graph = self.given_graph(captured)
        return g

    def _run(self, compiled, inputs, captured, result):
        from ...quiet import quiet_litert
        with quiet_litert():
            it = compiled.extra.get("interpreter") or reference_interpreter(compiled.tflite_path)[0]
            return run_interpreter(it, compiled, inputs, captured)


def shared_runtime_caveat(reference_info: dict, target_id: str) -> str | None:
    """Why a target's drift against this reference tells nothing, when the reference ran on the target's own
    runtime (None otherwise, and for reports of older xc)."""
    ran_with = (reference_info or {}).get("ran_with")
    if ran_with and target_id in ran_with.get("same_runtime_as", ()):
        return (f"the reference ran on {ran_with['delegate']} too (a custom op only the delegate has): {target_id} vs "
                "itself")
    return None
