"""Where the route departs from ONNX Runtime: when some output of the program differs from ONNX Runtime's, the
values every ONNX node computes are compared, node by node in the model's order, and the first node whose output
departs is named — the converter to suspect.

ONNX Runtime (all optimizations off) gives each node's outputs as extra graph outputs; the route gives them from
onnx2torch's module, whose submodules are the nodes of the prepared graph, by forward hooks. Both are keyed by the
value's name in the model (names.py maps the route's plain identifiers back), so a value the preparation kept
(most of them: folding, the rewrites and the output Identities keep the names of the values they replace) is
compared, and a value it folded away or renamed is skipped.
"""
from __future__ import annotations

import numpy as np

from ..errors import first_line


def first_departure(source, conversion, feeds: dict) -> dict:
    """{"node": the model's node name, "op_type", "output": its output that departs, "rel_l2", "compared": how many
    node outputs were compared}; "node" None (with "note") when no single node departs; {"error": …} when the
    comparison itself could not run."""
    from ..analysis.drift import DEPARTS_ABOVE
    try:
        mine = route_values(conversion)
        wanted = [o for n in source.graph.node for o in n.output if o in mine]
        theirs = onnx_runtime_values(source, feeds, wanted)
    except Exception as e:  # noqa: BLE001 — the localisation is extra: its failure is said, never raised
        return {"error": f"the node-by-node comparison could not run: {type(e).__name__}: {first_line(e, 200)}"}
    compared = 0
    for node in source.graph.node:
        for output in node.output:
            if output not in mine or output not in theirs or not isinstance(theirs[output], np.ndarray):
                continue
            compared += 1
            m = compare_output(theirs[output], np.asarray(mine[output]), held_in_float=True)
            departs = ("error" in m or m.get("dtype_match") is False and "note" not in m
                       or m.get("rel_l2") is not None and m["rel_l2"] > DEPARTS_ABOVE
                       or m.get("rel_l2") is None and m.get("max_abs", 0) > 0)
            if departs:
                found = {"node": node.name, "op_type": node.op_type, "output": output, "rel_l2": m.get("rel_l2"),
                         "compared": compared}
                if "error" in m:
                    found["why"] = m["error"]
                return found
    return {"node": None, "compared": compared,
            "note": f"no single node's output departs by more than {DEPARTS_ABOVE:g} (relative L2): the outputs' "
                    "error builds up over many nodes"}


def route_values(conversion) -> dict:
    """{value name in the model: the route's tensor} for every output of every onnx2torch submodule, from one run
    of the module on the analysis inputs."""
    import torch
    safe_outputs = {n.name: list(n.output) for n in conversion.safe.graph.node}
    values: dict = {}
    hooks = []

    def keep(name):
        def hook(module, inputs, result):
            results = result if isinstance(result, (tuple, list)) else (result,)
            for value, tensor in zip(safe_outputs.get(name, ()), results):
                if isinstance(tensor, torch.Tensor):
                    values[conversion.names.get(value, value)] = tensor.detach().numpy().copy()
        return hook

    for name, submodule in conversion.module.named_children():
        if name in conversion.module_names:
            hooks.append(submodule.register_forward_hook(keep(name)))
    try:
        with torch.no_grad():
            conversion.module(*conversion.args)
    finally:
        for h in hooks:
            h.remove()
    return values


def onnx_runtime_values(source, feeds: dict, wanted: list[str]) -> dict:
    """{value: ONNX Runtime's array} for the model's values `wanted`, made graph outputs of a copy of the model."""
    import os
    import tempfile

    import onnx
    import onnxruntime as ort
    m = onnx.ModelProto()
    m.CopyFrom(source)
    try:
        typed = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(m).graph.value_info}
    except Exception:  # noqa: BLE001 — ONNX Runtime types an output declared by name alone itself
        typed = {}
    present = {o.name for o in m.graph.output}
    for name in wanted:
        if name in present:
            continue
        if name in typed:
            m.graph.output.append(typed[name])
        else:
            m.graph.output.append(onnx.ValueInfoProto(name=name))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    if m.ByteSize() < (1 << 30):
        session = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    else:                     # above protobuf's 2 GB: the weights go to a file of their own, read at session start
        with tempfile.TemporaryDirectory(prefix="onnx-route-departure-") as folder:
            path = os.path.join(folder, "with_intermediates.onnx")
            onnx.save(m, path, save_as_external_data=True, location="weights.bin")
            session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    inputs = {i.name for i in session.get_inputs()}
    values = session.run(names, {k: np.asarray(v) for k, v in feeds.items() if k in inputs})
    return dict(zip(names, values))


def compare_output(ref: np.ndarray, got: np.ndarray, held_in_float: bool = False) -> dict:
    """One output of the route against ONNX Runtime's: shape and dtype first, then the values (drift_metrics).
    A shape or dtype that differs is the entry's `error` and no value metric is given: a transposed result can
    have a small relative error and still be wrong everywhere. Integer values held in float32 (the float model
    of a quantized graph, `held_in_float`) are the same numbers: compared, with a note."""
    from ..analysis.drift import drift_metrics
    shape_match, dtype_match = ref.shape == got.shape, ref.dtype == got.dtype
    facts = {"shape_match": shape_match, "dtype_match": dtype_match, "shape": list(got.shape),
             "reference_shape": list(ref.shape), "dtype": str(got.dtype), "reference_dtype": str(ref.dtype)}
    if not shape_match:
        return {**facts, "error": f"shape {list(got.shape)} from the program, {list(ref.shape)} from ONNX Runtime: "
                                  "the route's values for this output cannot be trusted"}
    held = (not dtype_match and held_in_float and ref.dtype.kind in "iub" and got.dtype.kind == "f"
            and bool(np.all(np.isnan(got) | (np.round(got) == got))))
    if not dtype_match and not held:
        return {**facts, "error": f"dtype {got.dtype} from the program, {ref.dtype} from ONNX Runtime: the route's "
                                  "values for this output cannot be trusted"}
    entry = {**drift_metrics(ref, got), **facts}
    if held:
        entry["note"] = f"{ref.dtype} values held in {got.dtype} (the float model of the quantized graph)"
    return entry
