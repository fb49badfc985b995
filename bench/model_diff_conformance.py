"""The model diff (xc_core.review.model_diff.diff_models) checked by mutation against models xc did not write: ONNX's
backend node tests (the ~1,900 small models the onnx wheel generates), the model folders the wheel ships
(simple, pytorch-converted, pytorch-operator), its "light" real architectures (AlexNet … DenseNet-121, up to ~1,700
nodes), and bigger models xc builds in code (bench/models.py's flat transformer; the bundled samples exported with
torch.onnx when --samples is given).

Each model gets ONE known edit made with onnx.helper, and the diff of (model, edited model) must report exactly that
edit and nothing else:

    none            no edit                                    → no change
    rename-nodes    every node renamed (names rotated)         → no change (matching must not read node names)
    rename-tensors  every intermediate tensor renamed          → no change
    rename-weights  every initializer renamed                  → no change (weights are matched through their readers)
    weight          one float initializer × 1.1                → one `weights` change, rel_l2 ≈ 0.1 "exact"
    weight-records  the same, the sides without values         → the same, rel_l2 the "lower" bound from the norms
    attribute       one int/float(s) attribute changed         → one `attributes` change, plus a `shapes` / `dtypes`
                                                                 change where ONNX shape inference says a change of
                                                                 a node's tensors starts (worked out from the two
                                                                 inferred graphs, never from the diff)
    insert          an Identity on one edge (not next to       → one `added`
                    another Identity)
    swap            an op swapped for one of the same arity     → one `replaced` (Relu↔Sigmoid, Add↔Mul, …)
                    and types

An edit that leaves the model invalid (onnx.checker, with strict shape inference where the unedited model passes
it) is not used; the next candidate site is tried, and a model with none is skipped for that kind (counted, with
why). A model whose inputs are all graph inputs gets its initializer for `weight` by turning one input into one
(the node test's own input values).

    python bench/model_diff_conformance.py [--cases REGEX] [--kinds weight,swap] [--samples] [--show N] [--json FILE]

Prints, per kind: models tried / exact / wrong / skipped, the first --show wrong cases (model, edit, expected, got),
the skip reasons, and the time spent diffing. Nothing is written but the --json file.
"""
from __future__ import annotations

import argparse
import collections
import functools
import glob
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

KINDS = ("none", "rename-nodes", "rename-tensors", "rename-weights", "weight", "weight-records", "attribute", "insert",
         "swap")
WEIGHT_FACTOR = 1.1
MAX_SITES = 40                  # candidate sites tried per model and kind before the kind is skipped for it
# Same arity, same type constraints (onnx.checker rejects the swaps whose types do not fit): op → the op put instead.
SWAPS = {"Relu": "Sigmoid", "Sigmoid": "Relu", "Tanh": "Sigmoid", "Exp": "Sigmoid", "Log": "Exp", "Sqrt": "Exp",
         "Abs": "Neg", "Neg": "Abs", "Sin": "Cos", "Cos": "Sin", "Tan": "Sin", "Asin": "Acos", "Acos": "Asin",
         "Atan": "Tan", "Sinh": "Cosh", "Cosh": "Sinh", "Asinh": "Sinh", "Acosh": "Cosh", "Atanh": "Tanh",
         "Floor": "Ceil", "Ceil": "Floor", "Round": "Floor", "Erf": "Tanh", "Softsign": "Tanh", "Softplus": "Relu",
         "Reciprocal": "Neg", "Sign": "Abs", "IsNaN": "IsInf",
         "Add": "Mul", "Mul": "Add", "Sub": "Div", "Div": "Sub", "Max": "Min", "Min": "Max", "Sum": "Max",
         "Mean": "Max", "Pow": "Sub", "And": "Or", "Or": "And", "Xor": "And", "Greater": "Less", "Less": "Greater",
         "GreaterOrEqual": "LessOrEqual", "LessOrEqual": "GreaterOrEqual", "Equal": "Greater",
         "BitwiseAnd": "BitwiseOr", "BitwiseOr": "BitwiseAnd", "BitwiseXor": "BitwiseAnd",
         "GlobalAveragePool": "GlobalMaxPool", "GlobalMaxPool": "GlobalAveragePool",
         "ReduceMax": "ReduceMin", "ReduceMin": "ReduceMax", "ReduceProd": "ReduceMax",
         "ArgMax": "ArgMin", "ArgMin": "ArgMax", "HardSwish": "Relu", "Mish": "Relu"}
# Pairs whose attributes mean the same on both sides (keepdims, axis, …): swapped with their attributes kept.
SWAP_KEEPS_ATTRIBUTES = {"ReduceMax", "ReduceMin", "ReduceProd", "ArgMax", "ArgMin"}
FLOAT_DTYPES = ("float16", "float32", "float64")


class Skip(Exception):
    """This kind of edit has no valid site in this model: the reason, in words."""


@dataclass
class Edit:
    """One edit of one model, with the changes the diff must report (worked out from the edit and ONNX shape
    inference, not from the diff)."""
    kind: str
    what: str                         # the edit in words
    base: object                      # onnx.ModelProto
    new: object
    expected: list[tuple] = field(default_factory=list)   # (kind, op, base_op, node id, keys): see _normalised
    weight: dict | None = None        # the scaled tensor: name, exact rel_l2, lower-bound rel_l2
    with_values: bool = True


# ---------------------------------------------------------------------------------------------- the corpus ----
def corpus(cases_pattern: str = "", samples: bool = False) -> list[tuple[str, object, list | None]]:
    """[(name, ModelProto, the first data set's input arrays or None)]: ONNX's node tests, then the model folders
    and light models the onnx wheel ships, then bigger models built in code."""
    out = []
    pattern = re.compile(cases_pattern) if cases_pattern else None
    for name, case in node_test_cases().items():
        if pattern is None or pattern.search(name):
            out.append((name, case.model, _input_arrays(case.data_sets[0][0]) if case.data_sets else None))
    out += shipped_models(pattern)
    for name, build in built_models(samples).items():
        if pattern is None or pattern.search(name):
            out.append((name, build(), None))
    return out


@functools.lru_cache(maxsize=1)
def node_test_cases() -> dict:
    """ONNX's node tests by name (generated in memory once: ~6 s)."""
    from xc_core.onnx_route.conformance import node_cases
    return node_cases()


def _input_arrays(values) -> list:
    import onnx
    from onnx import numpy_helper
    return [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in values]


def _onnx_data_dir() -> str:
    import onnx
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def shipped_models(pattern: re.Pattern | None = None) -> list[tuple[str, object, list | None]]:
    """The onnx wheel's model folders (model.onnx + test_data_set_0/input_*.pb) and light_*.onnx architectures
    (those whose name `pattern` finds)."""
    import onnx
    from onnx import numpy_helper
    out = []
    data = _onnx_data_dir()
    for folder in ("simple", "pytorch-converted", "pytorch-operator"):
        for path in sorted(glob.glob(os.path.join(data, folder, "*", "model.onnx"))):
            name = f"{folder}/{os.path.basename(os.path.dirname(path))}"
            if pattern is not None and not pattern.search(name):
                continue
            inputs = []
            pbs = glob.glob(os.path.join(os.path.dirname(path), "test_data_set_0", "input_*.pb"))
            for pb in sorted(pbs, key=lambda p: int(re.search(r"input_(\d+)", p).group(1))):
                tensor = onnx.TensorProto()
                try:
                    with open(pb, "rb") as f:
                        tensor.ParseFromString(f.read())
                    inputs.append(numpy_helper.to_array(tensor))
                except Exception:          # a sequence or optional input: no array for it
                    inputs.append(None)
            out.append((name, onnx.load(path), inputs))
    for path in sorted(glob.glob(os.path.join(data, "light", "*.onnx"))):
        name = f"light/{os.path.basename(path)[:-5]}"
        if pattern is None or pattern.search(name):
            out.append((name, onnx.load(path), None))
    return out


def built_models(samples: bool) -> dict:
    """{name: () → ModelProto}: bench/models.py's flat transformer, and (samples) the bundled samples through
    torch.onnx's dynamo exporter as xc's capture runs it (module paths in the node metadata)."""
    out = {"built/flat_transformer_4": lambda: _flat_transformer(4)}
    if samples:
        from xc_core.sources.samples import SAMPLES
        for name in SAMPLES:
            out[f"built/sample_{name}"] = (lambda n=name: _exported_sample(n))
    return out


def _flat_transformer(layers: int):
    import tempfile

    import onnx

    from bench.models import flat_transformer_onnx
    with tempfile.TemporaryDirectory(prefix="model-diff-conformance-") as d:
        return onnx.load(flat_transformer_onnx(os.path.join(d, "flat.onnx"), layers))


def _exported_sample(name: str):
    import torch

    from xc_core.quiet import quiet_torch
    from xc_core.sources.samples import SAMPLES
    sample = SAMPLES[name]
    args = tuple(torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in sample.inputs)
    with quiet_torch():
        program = torch.onnx.export(sample.model(), args, dynamo=True, optimize=False, verbose=False,
                                    input_names=[s.name for s in sample.inputs])
    return program.model_proto


# ---------------------------------------------------------------------------------------- a model as a side ----
def onnx_side(model, label: str, with_values: bool = True):
    """A ModelSide of an ONNX model as xc's capture of an ONNX source sees it (unnamed nodes named, module paths
    from torch.onnx's metadata), its weight records as xc records them (initializers, Constant tensors), and
    (with_values) their arrays."""
    import onnx

    from xc_core.analysis.model_weights import records_from_onnx
    from xc_core.readers.exported_program import _module_path_from_scopes
    from xc_core.readers.onnx import name_unnamed_nodes, onnx_ir_graph
    from xc_core.report.types import NodeRecord, WeightRecord
    from xc_core.review.model_sides import ONNX, ModelSide
    m = onnx.ModelProto()
    m.CopyFrom(model)
    name_unnamed_nodes(m)
    graph = onnx_ir_graph(m, "onnx")
    for node in graph.nodes:
        meta = node.attributes.pop("_metadata", {})
        if meta.get("pkg.torch.onnx.name_scopes"):
            node.module_path = _module_path_from_scopes(meta["pkg.torch.onnx.name_scopes"])
    arrays = weight_values(m) if with_values else {}
    return ModelSide(label=label, family=ONNX, graph="ONNX graph",
                     nodes=[NodeRecord.from_dict(n.to_dict()) for n in graph.nodes],
                     weights=[WeightRecord.from_dict(r) for r in records_from_onnx(m, graph)],
                     values=(lambda names: {n: arrays[n] for n in names if n in arrays}) if with_values else None)


def initializer_arrays(model) -> dict:
    from onnx import numpy_helper
    return {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}


def weight_values(model) -> dict:
    """{weight record name: array}: the initializers and the tensors of Constant nodes (by their output's name), as
    xc_core.analysis.model_weights.records_from_onnx names them."""
    from onnx import AttributeProto, numpy_helper
    out = initializer_arrays(model)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value" and a.type == AttributeProto.TENSOR:
                    out[node.output[0]] = numpy_helper.to_array(a.t)
    return out


# ------------------------------------------------------------------------------------------------ the edits ----
def copy_model(model):
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def check_level(model) -> str | None:
    """"strict" when the model passes onnx.checker with strict shape inference, "plain" when only without, None
    when not even that (such a model is not used)."""
    import onnx
    try:
        onnx.checker.check_model(model, full_check=True)
        return "strict"
    except Exception:
        pass
    try:
        onnx.checker.check_model(model)
        return "plain"
    except Exception:
        return None


def valid_at(model, level: str) -> bool:
    import onnx
    try:
        onnx.checker.check_model(model, full_check=level == "strict")
        return True
    except Exception:
        return False


def middle_first(n: int) -> list[int]:
    """Node positions from the middle of the graph outwards: an edit in the middle tests the alignment both ways."""
    mid = n // 2
    return sorted(range(n), key=lambda i: (abs(i - mid), i))


def node_ids(model) -> list[str]:
    """The ids xc gives the model's nodes (onnx_ir_graph after name_unnamed_nodes), in order."""
    from xc_core.readers.onnx import name_unnamed_nodes
    m = copy_model(model)
    name_unnamed_nodes(m)
    return [n.name for n in m.graph.node]


def subgraph_names(model) -> set[str]:
    """Every tensor name a subgraph (If/Loop/Scan body) uses: those are left alone by edits of the outer graph."""
    import onnx
    names = set()

    def walk(graph):
        for node in graph.node:
            names.update(node.input)
            names.update(node.output)
            for a in node.attribute:
                for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                          list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                    walk(g)
    for node in model.graph.node:
        for a in node.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                      list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                walk(g)
    return names


def readers(model) -> dict[str, list[int]]:
    """tensor name → positions of the top-level nodes reading it (once per reading node)."""
    out = collections.defaultdict(list)
    for i, node in enumerate(model.graph.node):
        for name in dict.fromkeys(x for x in node.input if x):
            out[name].append(i)
    return out


def edit_none(model, level, inputs):
    return Edit("none", "no edit", model, copy_model(model))


def edit_rename_nodes(model, level, inputs):
    ids = node_ids(model)
    new = copy_model(model)
    if len(ids) > 1:   # each node gets the next node's name: a matcher reading names pairs every node wrongly
        for i, node in enumerate(new.graph.node):
            node.name = ids[(i + 1) % len(ids)]
    else:
        new.graph.node[0].name = "renamed_" + ids[0]
    return Edit("rename-nodes", f"{len(ids)} node(s) renamed (names rotated)", model, new)


def edit_rename_tensors(model, level, inputs):
    if subgraph_names(model):
        raise Skip("has subgraphs (their outer-scope names would need renaming too)")
    kept = {v.name for v in list(model.graph.input) + list(model.graph.output)} | \
        {i.name for i in model.graph.initializer}
    intermediate = [o for node in model.graph.node for o in node.output if o and o not in kept]
    if not intermediate:
        raise Skip("no intermediate tensor")
    rename = {old: f"t{(i * 7919) % 100003}_{old[::-1]}" for i, old in enumerate(intermediate)}
    new = copy_model(model)
    for node in new.graph.node:
        node.input[:] = [rename.get(x, x) for x in node.input]
        node.output[:] = [rename.get(x, x) for x in node.output]
    for vi in new.graph.value_info:
        vi.name = rename.get(vi.name, vi.name)
    if not valid_at(new, level):
        raise Skip("renamed model is invalid")
    return Edit("rename-tensors", f"{len(rename)} intermediate tensor(s) renamed", model, new)


def edit_rename_weights(model, level, inputs):
    names = [i.name for i in model.graph.initializer]
    if not names:
        raise Skip("no initializer")
    if set(names) & subgraph_names(model):
        raise Skip("a subgraph reads an initializer (its outer-scope name would need renaming too)")
    rename = {old: f"w{(i * 7919) % 100003}_{old[::-1]}" for i, old in enumerate(names)}
    new = copy_model(model)
    for init in new.graph.initializer:
        init.name = rename[init.name]
    for node in new.graph.node:
        node.input[:] = [rename.get(x, x) for x in node.input]
    for vi in list(new.graph.input) + list(new.graph.value_info):   # IR < 4 lists initializers as inputs too
        vi.name = rename.get(vi.name, vi.name)
    if not valid_at(new, level):
        raise Skip("renamed model is invalid")
    return Edit("rename-weights", f"{len(rename)} initializer(s) renamed", model, new)


def _with_input_as_initializer(model, inputs, level):
    """The model with one float graph input (read by one node, not by a subgraph) turned into an initializer holding
    the node test's input value, and that input's name; None when no input fits."""
    from onnx import numpy_helper
    initializers = {i.name for i in model.graph.initializer}
    graph_inputs = [v for v in model.graph.input if v.name not in initializers]
    if not inputs or len(inputs) != len(graph_inputs):
        return None
    read_by, in_subgraphs = readers(model), subgraph_names(model)
    for vi, arr in zip(graph_inputs, inputs):
        if (isinstance(arr, np.ndarray) and arr.dtype.name in FLOAT_DTYPES and np.any(arr)
                and np.all(np.isfinite(arr)) and len(read_by.get(vi.name, ())) == 1 and vi.name not in in_subgraphs):
            m = copy_model(model)
            keep = [v for v in m.graph.input if v.name != vi.name]
            del m.graph.input[:]
            m.graph.input.extend(keep)
            m.graph.initializer.append(numpy_helper.from_array(arr, vi.name))
            if valid_at(m, level):
                return m, vi.name
    return None


def _weight_edit(model, level, inputs, kind):
    """One float initializer × 1.1: the one nearest the middle of the graph among those read by exactly one node
    (so that "which node's weight changed" has one answer), finite and not all zero."""
    from onnx import numpy_helper
    base, how = model, ""
    read_by, in_subgraphs = readers(model), subgraph_names(model)
    arrays = initializer_arrays(model)
    rank = {position: r for r, position in enumerate(middle_first(len(model.graph.node)))}

    def fits(name):
        arr = arrays[name]
        return (arr.dtype.name in FLOAT_DTYPES and np.any(arr) and len(read_by.get(name, ())) == 1
                and name not in in_subgraphs and np.all(np.isfinite(arr)))
    candidates = sorted((n for n in arrays if fits(n)), key=lambda n: rank[read_by[n][0]])
    if not candidates:
        turned = _with_input_as_initializer(model, inputs, level)
        if turned is None:
            raise Skip("no float initializer read by one node, and no graph input to turn into one")
        base, name = turned
        arrays = initializer_arrays(base)
        how = " (a graph input turned into an initializer)"
    else:
        name = candidates[0]
    arr = arrays[name]
    scaled = (arr.astype(np.float64) * WEIGHT_FACTOR).astype(arr.dtype)
    if np.array_equal(scaled, arr):
        raise Skip("× 1.1 leaves the tensor as it is in its dtype")
    new = copy_model(base)
    for init in new.graph.initializer:
        if init.name == name:
            init.CopyFrom(numpy_helper.from_array(scaled, name))
    b, n = arr.astype(np.float64).ravel(), scaled.astype(np.float64).ravel()
    norm = np.linalg.norm(b)
    reader = node_ids(base)[readers(base)[name][0]]
    op = base.graph.node[readers(base)[name][0]].op_type
    e = Edit(kind, f"initializer {name!r} (read by {reader}) × {WEIGHT_FACTOR}{how}", base, new,
             with_values=kind == "weight",
             weight={"name": name, "exact": float(np.linalg.norm(n - b) / norm),
                     "lower": float(abs(np.linalg.norm(n) - norm) / norm)})
    e.expected = [("weights", op, None, reader, (name,))]
    return e


def edit_weight(model, level, inputs):
    return _weight_edit(model, level, inputs, "weight")


def edit_weight_records(model, level, inputs):
    return _weight_edit(model, level, inputs, "weight-records")


def _changed_value(v):
    if isinstance(v, float):
        return v * 1.5 if v else 0.5
    return 1 - v if v in (0, 1) else v + 1


def edit_attribute(model, level, inputs):
    import onnx
    from onnx import helper
    ids, tried = node_ids(model), 0
    relaxed = without_declared_shapes(model)
    for i in middle_first(len(model.graph.node)):
        node = model.graph.node[i]
        for a in sorted(node.attribute, key=lambda a: a.name):
            if a.type not in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.INTS,
                              onnx.AttributeProto.FLOATS):
                continue
            value = helper.get_attribute_value(a)
            if isinstance(value, (list, tuple)) or hasattr(value, "__len__"):
                value = list(value)
                if not value:
                    continue
                changed = [_changed_value(value[0])] + value[1:]
            else:
                changed = _changed_value(value)
            tried += 1
            if tried > MAX_SITES:
                raise Skip(f"no valid attribute change in the first {MAX_SITES} tried")
            # A change of shape conflicts with the output shapes the model declares: then both sides drop them
            # (shape inference gives them again), so the edit stays valid and its shape changes show.
            for base in (model, relaxed):
                new = copy_model(base)
                target = next(x for x in new.graph.node[i].attribute if x.name == a.name)
                target.CopyFrom(helper.make_attribute(a.name, changed))
                if helper.get_attribute_value(target) == helper.get_attribute_value(a) or not valid_at(new, level):
                    continue
                e = Edit("attribute", f"{ids[i]} ({node.op_type}) attribute {a.name}: {value} → {changed}"
                         + ("" if base is model else " (declared output shapes dropped on both sides)"), base, new)
                e.expected = [("attributes", node.op_type, None, ids[i], (a.name,))] + \
                    _shape_dtype_changes(base, new, list(range(len(ids))), edited=i)
                return e
    raise Skip("no int/float attribute" if not tried else "every attribute change makes the model invalid")


def without_declared_shapes(model):
    """The model with its graph outputs' dimensions made unknown (rank and element type kept: the checker wants a
    shape) and its value_info dropped."""
    m = copy_model(model)
    for vi in m.graph.output:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for dim in vi.type.tensor_type.shape.dim:
                dim.Clear()
    del m.graph.value_info[:]
    return m


def edit_insert(model, level, inputs):
    from onnx import helper
    initializers = {i.name for i in model.graph.initializer}
    producer_op = {o: node.op_type for node in model.graph.node for o in node.output if o}
    produced = set(producer_op)
    graph_inputs = {v.name for v in model.graph.input} - initializers
    taken = produced | graph_inputs | initializers | subgraph_names(model)
    tried = 0
    for i in middle_first(len(model.graph.node)):
        node = model.graph.node[i]
        for slot, x in enumerate(node.input):
            if not x or not (x in produced or x in graph_inputs):
                continue
            if node.op_type == "Identity" or producer_op.get(x) == "Identity":
                continue    # next to an Identity, which of the two is the inserted one is a matter of taste
            tried += 1
            if tried > MAX_SITES:
                raise Skip(f"no valid edge in the first {MAX_SITES} tried")
            out, name = x + "__inserted", "inserted_identity"
            while out in taken:
                out += "_"
            new = copy_model(model)
            new.graph.node[i].input[slot] = out
            new.graph.node.insert(i, helper.make_node("Identity", [x], [out], name=name))
            if not valid_at(new, level):
                continue
            e = Edit("insert", f"Identity on edge {x!r} into {node_ids(model)[i]} ({node.op_type}) input {slot}",
                     model, new)
            positions = list(range(i)) + list(range(i + 1, len(new.graph.node)))     # new position of base node k
            e.expected = [("added", "Identity", None, name, ())] + _shape_dtype_changes(model, new, positions)
            return e
    raise Skip("no edge" if not tried else "an Identity makes the model invalid on every edge tried")


def edit_swap(model, level, inputs):
    ids, tried = node_ids(model), 0
    for i in middle_first(len(model.graph.node)):
        node = model.graph.node[i]
        other = SWAPS.get(node.op_type)
        if node.domain not in ("", "ai.onnx") or other is None or other == node.op_type:
            continue
        if node.attribute and node.op_type not in SWAP_KEEPS_ATTRIBUTES:
            continue
        tried += 1
        if tried > MAX_SITES:
            break
        new = copy_model(model)
        new.graph.node[i].op_type = other
        if not valid_at(new, level):
            continue
        e = Edit("swap", f"{ids[i]}: {node.op_type} → {other}", model, new)
        # an unnamed node's id is made of its op type: the new side's id is another
        e.expected = [("replaced", other, node.op_type, node_ids(new)[i], ())] + \
            _shape_dtype_changes(model, new, list(range(len(ids))), edited=i)
        return e
    raise Skip("no swappable op" if not tried else "every swap makes the model invalid")


EDITS = {"none": edit_none, "rename-nodes": edit_rename_nodes, "rename-tensors": edit_rename_tensors,
         "rename-weights": edit_rename_weights, "weight": edit_weight, "weight-records": edit_weight_records,
         "attribute": edit_attribute, "insert": edit_insert, "swap": edit_swap}


def _shape_dtype_changes(base, new, positions: list[int], edited: int | None = None) -> list[tuple]:
    """The `shapes` / `dtypes` changes ONNX shape inference implies, where each change starts (the diff's rule: a
    stride change is the conv's output once, not every shape after it). Base node k and new node positions[k]
    compared tensor by tensor as the ONNX reader records them; a node reports
      - its changed inputs and outputs when a changed input is not another node's output (a graph input, a weight);
      - else its changed outputs when none of its inputs changed, or when it is the `edited` node;
      - else nothing (its changed inputs are the producer's change).
    Keys "input i" / "output i", one change per node and kind."""
    from xc_core.readers.onnx import name_unnamed_nodes, onnx_ir_graph
    graphs = []
    for model in (base, new):
        m = copy_model(model)
        name_unnamed_nodes(m)
        graphs.append(onnx_ir_graph(m, "onnx").nodes)
    produced = {t.name for node in graphs[1] for t in node.outputs}
    out = []
    for k, b in enumerate(graphs[0]):
        n = graphs[1][positions[k]]
        for kind, attr in (("shapes", "shape"), ("dtypes", "dtype")):
            def changed(bs, ns):
                return [j for j, (x, y) in enumerate(zip(bs, ns)) if getattr(x, attr) != getattr(y, attr)]
            ins, outs = changed(b.inputs, n.inputs), changed(b.outputs, n.outputs)
            if any(n.inputs[j].name not in produced for j in ins):
                keys = [f"input {j}" for j in ins] + [f"output {j}" for j in outs]
            elif outs and (not ins or positions[k] == edited):
                keys = [f"output {j}" for j in outs]
            else:
                keys = []
            if keys:
                out.append((kind, n.op_type, None, n.id, tuple(keys)))
    return out


# --------------------------------------------------------------------------------------------------- judging ----
def _normalised(change: dict) -> tuple:
    """A diff change in the form expected changes take: (kind, op, base_op, node id, keys)."""
    kind = change.get("kind")
    node = change.get("base_node") if kind == "removed" else change.get("new_node")
    detail = change.get("detail") or {}
    if kind == "weights":
        keys = tuple(sorted(t.get("base_name") or t.get("name") for t in detail.get("tensors", [])))
    elif kind in ("attributes", "shapes", "dtypes"):
        keys = tuple(sorted(detail))
    else:
        keys = ()
    return (kind, change.get("op_type"), change.get("base_op") if kind == "replaced" else None, node,
            tuple(sorted(keys)))


def judge(edit: Edit, diff: dict) -> list[str]:
    """What is wrong with the diff of this edit (empty: exactly the edit)."""
    problems = []
    if not diff.get("comparable"):
        return [f"not comparable: {diff.get('line')}"]
    got = sorted(_normalised(c) for c in diff.get("changes", []))
    expected = sorted((k, op, bop, node, tuple(sorted(keys))) for k, op, bop, node, keys in edit.expected)
    if got != expected:
        problems.append(f"changes: expected {expected}, got {got}")
    counts = collections.Counter(c.get("kind") for c in diff.get("changes", []))
    summary = diff.get("summary", {})
    for kind in ("added", "removed", "replaced", "attributes", "shapes", "dtypes", "weights"):
        if summary.get(kind, 0) != counts.get(kind, 0):
            problems.append(f"summary[{kind}] = {summary.get(kind)} but {counts.get(kind, 0)} such change(s)")
    for key in ("blocks", "renamed_modules"):
        if diff.get(key):
            problems.append(f"{key}: {diff[key]}")
    for c in diff.get("changes", []):
        if not c.get("text") or "\n" in c["text"]:
            problems.append(f"a change's text is not one line: {c.get('text')!r}")
    if edit.weight and not problems:
        tensors = next(c for c in diff["changes"] if c["kind"] == "weights")["detail"]["tensors"]
        t = tensors[0]
        bound = "exact" if edit.with_values else "lower"
        want = edit.weight["exact" if edit.with_values else "lower"]
        if t.get("rel_l2_bound") != bound:
            problems.append(f"rel_l2_bound {t.get('rel_l2_bound')!r}, expected {bound!r}")
        if t.get("rel_l2") is None or not np.isclose(t["rel_l2"], want, rtol=1e-4, atol=1e-7):
            problems.append(f"rel_l2 {t.get('rel_l2')}, expected {want:.6g} ({bound})")
        if t.get("base_sha256") == t.get("new_sha256"):
            problems.append("base_sha256 == new_sha256")
    return problems


@dataclass
class Outcome:
    model: str
    kind: str
    status: str                       # exact | wrong | skipped
    what: str = ""
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0              # the diff's time

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def run_model(name: str, model, inputs, kinds=KINDS) -> list[Outcome]:
    """Every kind of edit on one model, judged."""
    from xc_core.review.model_diff import diff_models
    level = check_level(model)
    if level is None:
        return [Outcome(name, k, "skipped", problems=["the unedited model fails onnx.checker"]) for k in kinds]
    out = []
    for kind in kinds:
        try:
            edit = EDITS[kind](model, level, inputs)
        except Skip as why:
            out.append(Outcome(name, kind, "skipped", problems=[str(why)]))
            continue
        try:
            base = onnx_side(edit.base, name, edit.with_values)
            new = onnx_side(edit.new, name + " (edited)", edit.with_values)
            t0 = time.perf_counter()
            diff = diff_models(base, new)
            seconds = time.perf_counter() - t0
            problems = judge(edit, diff)
        except Exception as e:  # noqa: BLE001 — a crash is a wrong case, the run goes on
            seconds, problems = 0.0, [f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"]
        out.append(Outcome(name, kind, "wrong" if problems else "exact", edit.what, problems, seconds))
    return out


# ------------------------------------------------------------------------------------------------- the table ----
def table(outcomes: list[Outcome], kinds=KINDS) -> str:
    rows = [f"{'edit':<16}{'tried':>7}{'exact':>7}{'wrong':>7}{'skipped':>9}{'diff s':>9}"]
    for kind in kinds:
        mine = [o for o in outcomes if o.kind == kind]
        tried = [o for o in mine if o.status != "skipped"]
        rows.append(f"{kind:<16}{len(tried):>7}{sum(o.status == 'exact' for o in tried):>7}"
                    f"{sum(o.status == 'wrong' for o in tried):>7}{len(mine) - len(tried):>9}"
                    f"{sum(o.seconds for o in mine):>9.2f}")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="", help="only the models whose name matches this regular expression")
    ap.add_argument("--kinds", default=",".join(KINDS), help="the edits to make (comma-separated)")
    ap.add_argument("--samples", action="store_true", help="also the bundled samples, exported with torch.onnx")
    ap.add_argument("--show", type=int, default=5, help="wrong cases printed per edit kind")
    ap.add_argument("--json", default=None, help="write every outcome here")
    args = ap.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown edit kind(s) {sorted(unknown)}; known: {', '.join(KINDS)}")
    import warnings
    warnings.simplefilter("ignore")
    t0 = time.monotonic()
    models = corpus(args.cases, args.samples)
    print(f"{len(models)} model(s) ({time.monotonic() - t0:.0f} s to build)", flush=True)
    outcomes = []
    for i, (name, model, inputs) in enumerate(models):
        outcomes += run_model(name, model, inputs, kinds)
        if sys.stdout.isatty():
            print(f"  {i + 1} / {len(models)}", end="\r", flush=True)
    print(f"({time.monotonic() - t0:.0f} s in all)\n")
    print(table(outcomes, kinds))
    for kind in kinds:
        wrong = [o for o in outcomes if o.kind == kind and o.status == "wrong"]
        if wrong:
            print(f"\n{kind}: {len(wrong)} wrong, the first {min(len(wrong), args.show)}:")
            for o in wrong[:args.show]:
                print(f"  {o.model}: {o.what}")
                for p in o.problems:
                    print(f"      {p[:600]}")
    print("\nskipped, by reason:")
    reasons = collections.Counter((o.kind, o.problems[0]) for o in outcomes if o.status == "skipped")
    for (kind, why), n in sorted(reasons.items()):
        print(f"  {kind:<16}{n:>6}  {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([o.to_dict() for o in outcomes], f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
