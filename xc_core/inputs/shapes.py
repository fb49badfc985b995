"""Inputs that fit: every symbolic dim gets a value the model accepts, and the report says why.

Loaders mark each symbolic dim with its name (`InputSpec.dim_names`). `resolve_inputs` then fixes, in order of
precedence: the user's .npz arrays, `--shape` (a whole input), `--dim NAME=V` (every dim of that name), and for
the rest a default chosen from the dim's name and the input's role, *probed*: the reference runs on the
candidates of a short ladder and the first rung that runs is kept. What failed on the way is recorded per rung
("height=width=224 failed at Concat '/m/Concat': …").

Defaults and ladders (a dim of one name takes one value across all inputs; the image sides of one input move
together):

| dim                                                            | ladder                          |
|----------------------------------------------------------------|---------------------------------|
| batch (batch, N, bs, … or the first axis of an unnamed input)  | 1                               |
| image side (height, width, H, W, or axes 2-3 of a 4-D float    | 224, 256, 320, 640, 32, 64      |
|   input with 1 or 3 channels; axes 1-2 when channels are last) |                                 |
| sequence (seq, sequence, time, T, length, frames, tokens, …)   | 16, 64, 128                     |
| anything else                                                  | 16, 32, 64, 8, 1                |
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..errors import XcInputError
from ..sources.spec import InputSpec

BATCH_LADDER = (1,)
IMAGE_LADDER = (224, 256, 320, 640, 32, 64)
SEQUENCE_LADDER = (16, 64, 128)
OTHER_LADDER = (16, 32, 64, 8, 1)

_BATCH = re.compile(r"^(batch|batch_?size|bs|n|b|num_?batch(es)?)$", re.I)
_IMAGE = re.compile(r"^(h|w|height|width|img_?[hw]|image_?(height|width)|in_?[hw]|input_?(height|width))$", re.I)
_SEQUENCE = re.compile(r"^(seq|seq_?len(gth)?|sequence(_?length)?|t|time|time_?steps?|len(gth)?|frames?|"
                       r"num_?frames|tokens?|num_?tokens|src_?len|tgt_?len|past_?sequence_?length|"
                       r"decoder_?sequence_?length|encoder_?sequence_?length|samples|num_?samples)$", re.I)

# Integer inputs: names whose values are 0/1 flags.
_FLAG_NAMES = re.compile(r"(attention_?mask|padding_?mask|token_?type_?ids|segment_?ids|mask)$", re.I)
DEFAULT_INT_HIGH = 16

Probe = Callable[[list[InputSpec]], str | None]   # runs the reference on these specs; None, or why it failed


@dataclass
class DimGroup:
    """Dims that take one value together: one named dim across inputs, or the image sides of one input."""
    key: str
    label: str                   # what the report calls it: "height=width", "sequence"
    kind: str                    # batch | image | sequence | other
    members: list[tuple[str, int]]
    ladder: tuple[int, ...]
    low: int | None = None       # bounds an ExportedProgram's range constraints give
    high: int | None = None


def resolve_inputs(specs: list[InputSpec], *, shapes: dict | None = None, dims: dict[str, int] | None = None,
                   values: dict[str, float] | None = None, ranges: dict[str, tuple[float, float]] | None = None,
                   arrays: dict[str, np.ndarray] | None = None, probe: Probe | None = None,
                   dim_bounds: dict[str, tuple[int | None, int | None]] | None = None,
                   value_hints: dict[str, str] | None = None) -> tuple[list[InputSpec], dict]:
    """The specs that will run and a record of how each input got its shape and values."""
    shapes, dims, values, ranges = shapes or {}, dims or {}, values or {}, ranges or {}
    if arrays is not None and not arrays and specs:     # an .npz given, but empty: every input would miss
        raise XcInputError("the .npz holds no arrays; accepted: one array per model input, named as the input "
                           "(the model takes " + ", ".join(f"{s.name} {describe(s)}" for s in specs) + ")")
    arrays = arrays if arrays is not None else {}
    _check_names(specs, shapes, dims, values, ranges, arrays)
    record = {"inputs": {}, "probes": [], "picked_by": "declared"}
    out: dict[str, InputSpec] = {}
    for s in specs:
        if s.name in arrays:
            out[s.name] = _from_array(s, arrays[s.name])
            record["inputs"][s.name] = {"shape_from": "npz", "values_from": "npz"}
        elif s.name in shapes:
            shape, dtype = shapes[s.name]
            if s.dim_names and len(shape) != len(s.shape):
                raise XcInputError(f"input '{s.name}' takes {len(s.shape)} dims ({describe(s)}); the given shape "
                                   f"{'x'.join(map(str, shape))} has {len(shape)}", fix="shapes")
            out[s.name] = replace(s, shape=list(shape), dtype=dtype or s.dtype, note="shape given by the user")
            record["inputs"][s.name] = {"shape_from": "user"}
        else:
            out[s.name] = s
            record["inputs"][s.name] = {"shape_from": "declared" if not _free_axes(s) else "default"}

    # Named dims the user set, and dims a user-given array or shape fixes, bind every other dim of that name.
    bound: dict[str, int] = dict(dims)
    for s in specs:
        if s.name in arrays or s.name in shapes:
            for axis, label in enumerate(s.dim_names or ()):
                if label and label != "?" and axis < len(out[s.name].shape):
                    bound.setdefault(label, out[s.name].shape[axis])
    groups = _groups([out[s.name] for s in specs if s.name not in arrays and s.name not in shapes], bound,
                     dim_bounds or {})
    for s in list(out.values()):
        if s.name in arrays or s.name in shapes:
            continue
        shape = list(s.shape)
        for axis, label in enumerate(s.dim_names or ()):
            if label and label in bound and label != "?":
                shape[axis] = int(bound[label])
        out[s.name] = replace(s, shape=shape)
        if any(label in bound for label in (s.dim_names or ()) if label):
            record["inputs"][s.name]["shape_from"] = "user" if not _group_members(groups, s.name) else "default"

    # Values and integer ranges.
    for s in list(out.values()):
        hints = []
        if s.name in values:
            out[s.name] = replace(s, value=float(values[s.name]), low=None, high=None)
            record["inputs"][s.name]["values_from"] = f"value {values[s.name]:g}"
        elif s.name in arrays:
            pass
        else:
            if s.name in ranges:
                lo, hi = ranges[s.name]
                out[s.name] = replace(s, low=lo, high=hi)
                hints.append(f"values from [{lo:g}, {hi:g}) given by the user")
            elif s.dtype.startswith(("int", "uint")) and s.low is None:
                hi = 2 if _FLAG_NAMES.search(s.name) else DEFAULT_INT_HIGH
                out[s.name] = replace(s, low=0, high=hi)
            record["inputs"][s.name].setdefault("values_from", "seeded-random")
        if value_hints and s.name in value_hints and s.name not in values and s.name not in arrays:
            record["inputs"][s.name]["value_matters"] = value_hints[s.name]

    order = [s.name for s in specs]
    resolved = [out[n] for n in order]
    if groups:
        resolved = _probe(resolved, groups, probe, record)
    for i, s in enumerate(resolved):
        resolved[i] = replace(s, note=_note(s, record["inputs"][s.name], groups))
    return resolved, record


def _check_names(specs, shapes, dims, values, ranges, arrays) -> None:
    names = [s.name for s in specs]
    known_dims = sorted({d for s in specs for d in (s.dim_names or ()) if d and d != "?"})
    listing = ", ".join(f"{s.name} {describe(s)}" for s in specs)
    for what, given in (("--shape", shapes), ("--value", values), ("--range", ranges)):
        unknown = [n for n in given if n not in names]
        if unknown:
            raise XcInputError(f"{what} names no input of this model: {', '.join(unknown)}; its inputs are "
                               f"{listing}", fix=what)
    unknown = [d for d in dims if d not in known_dims]
    if unknown:
        raise XcInputError(f"--dim names no symbolic dim of this model: {', '.join(unknown)}; its dims are "
                           f"{', '.join(known_dims) or 'all fixed'} ({listing})", fix="--dim")
    missing = [n for n in names if n not in arrays] if arrays else []
    if arrays and missing:
        raise XcInputError(f"the .npz has no array for input(s) {', '.join(missing)}; it has "
                           f"{', '.join(sorted(arrays)) or 'none'}, and the model takes {listing}")
    extra = [k for k in arrays if k not in names]
    if extra:
        raise XcInputError(f"the .npz has array(s) {', '.join(sorted(extra))} that match no input; the model takes "
                           f"{listing}")


def _from_array(s: InputSpec, a: np.ndarray) -> InputSpec:
    """The spec an .npz array gives, after checking it against the model's declared input."""
    declared = describe(s)
    if s.dim_names or s.shape:
        if a.ndim != len(s.shape):
            raise XcInputError(f"input '{s.name}': the .npz array has {a.ndim} dims {list(a.shape)}; the model takes "
                               f"{len(s.shape)}: {declared}")
        for axis, (want, got) in enumerate(zip(s.shape, a.shape)):
            label = (s.dim_names[axis] if axis < len(s.dim_names) else None) if s.dim_names else None
            if label is None and want != got:
                raise XcInputError(f"input '{s.name}': the .npz array is {list(a.shape)}; the model takes "
                                   f"{declared} (axis {axis} must be {want})")
    kind = np.dtype(s.dtype).kind if s.dtype != "bfloat16" else "f"
    if a.dtype.kind != kind and not (kind in "iu" and a.dtype.kind in "iu"):
        what = {"f": "float", "i": "integer", "u": "integer", "b": "bool"}
        raise XcInputError(f"input '{s.name}': the .npz array is {a.dtype}; the model takes {s.dtype} "
                           f"({what.get(kind, kind)} values)")
    return replace(s, shape=list(a.shape), note="values from the .npz")


def describe(s: InputSpec) -> str:
    """An input's shape in the model's own words: [batch, 3, height, width] int64."""
    dims = []
    for axis, d in enumerate(s.shape):
        label = s.dim_names[axis] if s.dim_names and axis < len(s.dim_names) else None
        dims.append(label if label else str(d))
    return f"[{', '.join(dims)}] {s.dtype}"


def _free_axes(s: InputSpec) -> list[int]:
    return [i for i, label in enumerate(s.dim_names or ()) if label]


def _groups(specs: list[InputSpec], bound: dict[str, int], dim_bounds: dict) -> list[DimGroup]:
    groups: dict[str, DimGroup] = {}
    for s in specs:
        free = [i for i in _free_axes(s) if s.dim_names[i] not in bound]
        image_axes = _image_axes(s)
        for axis in free:
            label = s.dim_names[axis]
            named = label != "?"
            kind = _kind(label, axis, s, image_axes)
            if kind == "image" and not named or (kind == "image" and _IMAGE.match(label)):
                key = f"image:{s.name}"     # the sides of one image move together
            elif named:
                key = f"dim:{label}"
            else:
                key = f"axis:{s.name}:{axis}"
            g = groups.get(key)
            if g is None:
                ladder = {"batch": BATCH_LADDER, "image": IMAGE_LADDER, "sequence": SEQUENCE_LADDER}.get(
                    kind, OTHER_LADDER)
                lo, hi = dim_bounds.get(label, (None, None)) if named else (None, None)
                g = groups[key] = DimGroup(key, "", kind, [], ladder, lo, hi)
            g.members.append((s.name, axis))
    for g in groups.values():
        labels = []
        for name, axis in g.members:
            spec = next(s for s in specs if s.name == name)
            label = spec.dim_names[axis]
            labels.append(label if label != "?" else f"{name}[{axis}]")
        g.label = "=".join(dict.fromkeys(labels))
        if g.low is not None or g.high is not None:
            g.ladder = tuple(v for v in g.ladder if (g.low is None or v >= g.low) and (g.high is None or v <= g.high)) \
                or (max(g.low or 1, 1),)
    return list(groups.values())


def _kind(label: str, axis: int, s: InputSpec, image_axes: set[int]) -> str:
    if label != "?" and _BATCH.match(label):
        return "batch"
    if axis in image_axes or (label != "?" and _IMAGE.match(label)):
        return "image"
    if label != "?" and _SEQUENCE.match(label):
        return "sequence"
    if axis == 0 and len(s.shape) >= 2:
        return "batch"   # an unnamed leading dim of a batched input
    if len(s.shape) == 2 and axis == 1 and s.dtype.startswith("int"):
        return "sequence"  # [batch, ?] integer ids
    return "other"


def _image_axes(s: InputSpec) -> set[int]:
    """Spatial axes of a 4-D float input with 1 or 3 channels (NCHW, or NHWC when channels are last)."""
    if len(s.shape) != 4 or not s.dtype.startswith(("float", "bfloat")):
        return set()
    fixed = {i: d for i, d in enumerate(s.shape) if not (s.dim_names and s.dim_names[i])}
    if fixed.get(1) in (1, 3):
        return {2, 3}
    if fixed.get(3) in (1, 3):
        return {1, 2}
    return set()


def _group_members(groups: list[DimGroup], name: str) -> bool:
    return any(n == name for g in groups for n, _ in g.members)


def _assign(specs: list[InputSpec], groups: list[DimGroup], rung: int) -> tuple[list[InputSpec], dict[str, int]]:
    chosen = {g.key: g.ladder[min(rung, len(g.ladder) - 1)] for g in groups}
    by_input: dict[str, dict[int, int]] = {}
    for g in groups:
        for name, axis in g.members:
            by_input.setdefault(name, {})[axis] = chosen[g.key]
    out = []
    for s in specs:
        if s.name in by_input:
            shape = list(s.shape)
            for axis, v in by_input[s.name].items():
                shape[axis] = v
            s = replace(s, shape=shape)
        out.append(s)
    return out, chosen


def _probe(specs: list[InputSpec], groups: list[DimGroup], probe: Probe | None, record: dict) -> list[InputSpec]:
    rungs = max(len(g.ladder) for g in groups)
    first, chosen = _assign(specs, groups, 0)
    record["groups"] = [{"dim": g.label, "kind": g.kind, "ladder": list(g.ladder), "value": chosen[g.key],
                         "members": [f"{n}[{a}]" for n, a in g.members]} for g in groups]
    if probe is None:
        record["picked_by"] = "default (no reference to probe with)"
        return first
    for rung in range(rungs):
        candidate, chosen = _assign(specs, groups, rung)
        what = ", ".join(f"{g.label}={chosen[g.key]}" for g in groups)
        failure = probe(candidate)
        record["probes"].append({"dims": what, "ok": failure is None, "error": failure})
        if failure is None:
            record["picked_by"] = "probe" if rung else "default (ran first time)"
            for g, entry in zip(groups, record["groups"]):
                entry["value"] = chosen[g.key]
            return candidate
    record["picked_by"] = "default (every rung of the ladder failed; set the shapes)"
    return first


def _note(s: InputSpec, rec: dict, groups: list[DimGroup]) -> str:
    parts = []
    if rec.get("shape_from") == "npz":
        parts.append("shape and values from the .npz")
    elif rec.get("shape_from") == "user":
        parts.append("shape given by the user")
    else:
        mine = [(g, [a for n, a in g.members if n == s.name]) for g in groups]
        picked = [f"{g.label}={s.shape[axes[0]]} ({g.kind})" for g, axes in mine if axes]
        if picked:
            parts.append("symbolic dims set: " + ", ".join(picked))
    if s.value is not None:
        parts.append(f"every element set to {s.value:g}")
    elif s.low is not None and rec.get("values_from") != "npz":
        parts.append(f"integer values drawn from [{s.low:g}, {s.high:g})")
    if rec.get("value_matters"):
        parts.append(rec["value_matters"])
    return "; ".join(parts)
