"""The route checked against a suite xc did not write: ONNX's own backend node tests (onnx.backend.test.case.node,
shipped in the onnx wheel: one small model per case with its inputs and the outputs the ONNX spec says it gives).

Each case goes through the route as an analysis does (graph preparation → onnx2torch and xc's converters → traced
at the case's input shapes → torch.export), the program runs on the case's inputs, and its outputs are compared with
the expected ones as ONNX's own backend runner compares them (count, shape, dtype, values within the case's rtol /
atol). An outcome is one of:

- outside:    xc takes no such model as input (a sequence, optional or string input; a non-tensor output);
- match:      the program gives the expected outputs;
- mismatched: the program runs and gives other outputs (a silent error: what the route must never do);
- refused:    the route refuses in one line naming the op and what it takes (RouteError, XcInputError);
- crashed:    an exception nobody foresaw (a bare KeyError, IndexError … escaping or wrapped by a catch-all).

bench/onnx_conformance.py runs every case; tests/test_onnx_conformance.py runs a slice with one case per op type.
"""
from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np

OUTSIDE, MATCH, MISMATCHED, REFUSED, CRASHED = "outside", "match", "mismatched", "refused", "crashed"
OUTCOMES = (MATCH, MISMATCHED, REFUSED, CRASHED, OUTSIDE)


@dataclasses.dataclass
class Outcome:
    case: str
    ops: list                      # the case model's op types, in node order, without repeats
    status: str                    # one of OUTCOMES
    reason: str = ""               # the refusal, the crash or the mismatch, in one line
    op: str = ""                   # the op a refusal or a crash names (else the case's first op)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=1)
def node_cases() -> dict:
    """{case name: onnx's TestCase} for every node test of the installed onnx (generated in memory: ~8 s)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases()}


def run_case(case) -> Outcome:
    """One ONNX node test through the route (its first data set)."""
    model = case.model
    ops = list(dict.fromkeys(n.op_type for n in model.graph.node))
    inputs, expected = (_arrays(values) for values in case.data_sets[0])
    try:
        return _run(case.name, model, inputs, expected, case.rtol, case.atol, ops)
    except Exception as e:  # noqa: BLE001 — the harness itself must never stop the run
        return Outcome(case.name, ops, CRASHED, f"{type(e).__name__}: {_line(e)}", ops[0] if ops else "")


def _arrays(values) -> list:
    """A data set's values as numpy arrays (some cases hold TensorProtos — casts to and from float16, float8 … — or
    numpy scalars); sequences and optionals stay as they are."""
    import onnx
    from onnx import numpy_helper
    return [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto)
            else np.asarray(v) if isinstance(v, np.generic) else v for v in values]


def _run(name: str, model, inputs: list, expected: list, rtol: float, atol: float, ops: list) -> Outcome:
    import onnx

    from ..errors import XcInputError
    from ..readers.onnx import name_unnamed_nodes
    from ..sources.onnx_file import onnx_input_specs
    from .route import RouteError, convert, run_program
    m = onnx.ModelProto()
    m.CopyFrom(model)
    name_unnamed_nodes(m)
    first = ops[0] if ops else ""
    initializers = {i.name for i in m.graph.initializer}
    graph_inputs = [vi for vi in m.graph.input if vi.name not in initializers]
    if any(not isinstance(v, np.ndarray) or v.dtype == object for v in inputs) or len(inputs) != len(graph_inputs):
        return Outcome(name, ops, OUTSIDE, "a sequence, optional or string input", first)
    if any(not vi.type.HasField("tensor_type") for vi in m.graph.output) \
            or any(not isinstance(v, np.ndarray) or v.dtype == object for v in expected):
        return Outcome(name, ops, OUTSIDE, "a sequence, optional, map or string output", first)
    try:
        specs = onnx_input_specs(m)
    except XcInputError as e:
        return Outcome(name, ops, OUTSIDE, _line(e), first)
    feeds = {vi.name: value for vi, value in zip(graph_inputs, inputs)}
    specs = [dataclasses.replace(s, shape=list(feeds[s.name].shape)) for s in specs]
    try:
        conversion = convert(m, specs, feeds)
    except RouteError as e:
        status = CRASHED if e.unexpected else REFUSED
        return Outcome(name, ops, status, _line(e), _named_op(str(e), ops))
    except XcInputError as e:
        return Outcome(name, ops, REFUSED, _line(e), _named_op(str(e), ops))
    except Exception as e:  # noqa: BLE001
        return Outcome(name, ops, CRASHED, f"{type(e).__name__}: {_line(e)}", first)
    try:
        got = run_program(conversion.program, tuple(conversion.args[i] for i in conversion.used))
    except Exception as e:  # noqa: BLE001 — traced at these very inputs, the program must run on them
        return Outcome(name, ops, CRASHED, f"the program failed on the case's inputs: {type(e).__name__}: "
                                           f"{_line(e)}", first)
    from .converters import QUANTIZED_OPS
    held = bool(QUANTIZED_OPS & set(ops))
    wrong = compare(expected, got, rtol, atol, held_in_float=held)
    if not wrong and held and any(np.asarray(g).dtype != e.dtype for g, e in zip(got, expected)):
        return Outcome(name, ops, MATCH, HELD_IN_FLOAT, first)
    return Outcome(name, ops, MISMATCHED if wrong else MATCH, wrong, first)


# A quantized op's integer results held in float32: the route computes quantized graphs as a float model on purpose
# (converters.py), and its record says so (`float_model`); the values are the integers the spec gives.
HELD_IN_FLOAT = "integer values held in float32 (the route's declared float model of a quantized graph)"


def compare(expected: list, got: list, rtol: float, atol: float, held_in_float: bool = False) -> str:
    """'' when `got` are the expected outputs as ONNX's backend runner judges them (count, shape, dtype, then
    values within rtol / atol, NaN where NaN is expected; a float16 value also within two units in the last place;
    with `held_in_float`, integer outputs may come as the same integers in float32), else what differs first."""
    if len(got) != len(expected):
        return f"{len(got)} output(s), {len(expected)} expected"
    for i, (ref, out) in enumerate(zip(expected, got)):
        out = np.asarray(out)
        if out.shape != ref.shape:
            return f"output {i}: shape {list(out.shape)}, {list(ref.shape)} expected"
        if out.dtype != ref.dtype:
            integral = out.dtype.kind == "f" and bool(np.all(np.round(out) == out))
            if not (held_in_float and ref.dtype.kind in "iu" and integral):
                return f"output {i}: dtype {out.dtype}, {ref.dtype} expected"
            out = out.astype(ref.dtype)
        a, b = out, ref
        if a.dtype.name == "bfloat16" or a.dtype.kind not in "fciub":
            a, b = a.astype(np.float32), b.astype(np.float32)
        if a.dtype.kind == "b":
            close = a == b
        else:
            with np.errstate(all="ignore"):
                close = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
                if ref.dtype == np.float16:
                    # float16 results rounded at each op in another order land a rounding step or two apart (the
                    # case's rtol of 1e-3 is itself one or two steps): two units in the last place are rounding, not
                    # a wrong conversion
                    close |= np.abs(a.astype(np.float32) - b.astype(np.float32)) <= \
                        2 * np.spacing(np.abs(b)).astype(np.float32)
        if not np.all(close):
            bad = int(np.size(close) - np.count_nonzero(close))
            return f"output {i}: {bad} of {np.size(close)} value(s) outside rtol {rtol:g} / atol {atol:g}"
    return ""


def _named_op(message: str, ops: list) -> str:
    """The op a refusal names: its first word when that is one of the case's ops, or the op of 'no PyTorch
    converter for <op>'; else the case's first op."""
    found = re.match(r"(?:no PyTorch converter for )?([A-Z][A-Za-z0-9]*)\b", message)
    if found and found.group(1) in ops:
        return found.group(1)
    return ops[0] if ops else ""


def _line(e: BaseException) -> str:
    from ..errors import first_line
    return first_line(e, 300)


def onnx2torch_audit() -> dict:
    """onnx2torch's converters read against the ONNX spec, op by op: {(domain, op, opset): {"defaults": [{attribute,
    onnx2torch, spec, agrees}], "ignored": [attributes the spec defines that the converter never reads]}}.

    Found by reading each registered converter's source (ast; the onnx2torch helpers it calls too): every
    `attributes.get(name, default)` beside the spec's default (onnx.defs … default_value), and every attribute it
    reads at all. A default that disagrees is harmless in the route (graph_prep writes every default out before
    onnx2torch reads the node); an attribute it ignores is refused when set to anything but its default
    (converters.IGNORED_ATTRIBUTES, which tests/test_onnx_conformance.py holds to this audit)."""
    import onnx
    from onnx import helper

    from .converters import import_onnx2torch
    import_onnx2torch()
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY

    out = {}
    for key, converter in sorted(_CONVERTER_REGISTRY.items()):
        domain, op, version = key
        try:
            schema = onnx.defs.get_schema(op, version, domain)
        except Exception:  # noqa: BLE001 — an op outside onnx's schemas (com.microsoft): nothing to audit against
            continue
        if schema.since_version != version:
            continue            # a version onnx2torch registers that is no version of the op
        read, defaults, whole = _read_attributes(converter)
        if read is None:
            continue            # not onnx2torch's source (one of xc's own converters)
        rows = []
        for name, value in defaults.items():
            attr = schema.attributes.get(name)
            if attr is None or not attr.default_value.type:
                continue
            spec = helper.get_attribute_value(attr.default_value)
            spec = spec.decode() if isinstance(spec, bytes) else spec
            agrees = (value == spec if not isinstance(spec, float) or not isinstance(value, (int, float))
                      else abs(value - spec) <= 1e-6 * max(1.0, abs(spec)))
            rows.append({"attribute": name, "onnx2torch": value, "spec": spec, "agrees": bool(agrees)})
        ignored = [] if whole else sorted(set(schema.attributes) - read)
        out[(domain or "ai.onnx", op, version)] = {"defaults": rows, "ignored": ignored}
    return out


def _read_attributes(func, depth: int = 0):
    """(attributes read, {attribute: default} of `.get(name, default)`, whether the whole attribute dict is passed
    on) in the onnx2torch function `func` and the onnx2torch helpers it calls; (None, …) when `func` is not
    onnx2torch's."""
    import ast
    import inspect
    import textwrap
    taken = set()
    while getattr(func, "wrapped", None) is not None:    # xc's guard or wrapper: the onnx2torch converter it calls
        taken |= getattr(func, "takes", set())          # attributes whose nodes the wrapper converts itself
        func = func.wrapped
    if func.__module__.startswith("xc_core"):
        return None, {}, False
    if taken:
        read, defaults, whole = _read_attributes(func, depth)
        return (read | taken if read is not None else None), defaults, whole
    if not func.__module__.startswith("onnx2torch"):
        return None, {}, False
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    local = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            try:
                local[n.targets[0].id] = ast.literal_eval(n.value)
            except ValueError:
                pass
    read, defaults, whole = set(), {}, False
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute) and f.attr == "get" and n.args and isinstance(n.args[0], ast.Constant) \
                    and _reads_attributes(f.value):
                read.add(n.args[0].value)
                value = _evaluate(n.args[1], local, func.__globals__) if len(n.args) > 1 else None
                if value is not _UNKNOWN:
                    defaults[n.args[0].value] = value
            elif isinstance(f, ast.Name) and inspect.isfunction(func.__globals__.get(f.id)) and depth < 3:
                r, d, w = _read_attributes(func.__globals__[f.id], depth + 1)
                if r is not None:
                    read |= r
                    defaults = {**d, **defaults}
                    whole |= w
            if any(_reads_attributes(a) for a in list(n.args) + [k.value for k in n.keywords]):
                whole = True            # the attributes handed on whole (to a module or helper xc cannot see into)
        elif isinstance(n, ast.Subscript) and _reads_attributes(n.value) and isinstance(n.slice, ast.Constant):
            read.add(n.slice.value)
        elif isinstance(n, ast.Compare) and isinstance(n.left, ast.Constant) and \
                any(_reads_attributes(c) for c in n.comparators):
            read.add(n.left.value)                          # `'value' in node_attributes`
    return read, defaults, whole


_UNKNOWN = object()


def _reads_attributes(value) -> bool:
    """`node.attributes` or a local called `node_attributes` / `attributes`."""
    import ast
    return (isinstance(value, ast.Attribute) and value.attr == "attributes") or \
        (isinstance(value, ast.Name) and value.id in ("node_attributes", "attributes", "attrs"))


def _evaluate(expr, local: dict, module: dict):
    import ast
    try:
        return ast.literal_eval(expr)
    except ValueError:
        pass
    if isinstance(expr, ast.Name):
        if expr.id in local:
            return local[expr.id]
        value = module.get(expr.id, _UNKNOWN)
        return value if isinstance(value, (int, float, str, bytes, type(None), list, tuple)) else _UNKNOWN
    return _UNKNOWN
