"""Layout audit: the memory layout each compute node runs in, where the runtime says it, and every reorder or
transpose a compiler inserted, with the bytes it moves.

Where layouts come from:
- OpenVINO's runtime model gives each layer's `outputLayouts` as oneDNN format tags (abcd is NCHW, acdb NHWC,
  aBcd16b a channel-blocked NCHW16c); a Reorder layer converts from its producer's layout to its own.
- ONNX Runtime's NCHWc transformer runs Conv/Pool in the `com.microsoft.nchwc` domain on channel-blocked tensors,
  with ReorderInput (NCHW or NHWC → NCHWc) and ReorderOutput (back) around them.
- Core ML programs keep layouts implicit: a `transpose` op whose permutation moves the channel axis between 1 and
  the last is an NCHW↔NHWC transition; other permutations are listed as they are.
- Inductor's operand-preparation kernels copy a tensor into the layout its library call wants.
Bytes are element count × element size of the tensor moved, where its shape is static.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..ir import COMPUTE, LAYOUT, Graph
from .boundaries import tensor_bytes

# oneDNN format tags as users know them (oneDNN "Memory Format Propagation" / dnnl_format_tag_t docs).
_ONEDNN_TAGS = {"a": "C", "ab": "NC", "abc": "NCW", "acb": "NWC", "abcd": "NCHW", "acdb": "NHWC",
                "abcde": "NCDHW", "acdeb": "NDHWC", "aBc8b": "NCW8c", "aBc16b": "NCW16c", "aBcd8b": "NCHW8c",
                "aBcd16b": "NCHW16c", "aBcde8b": "NCDHW8c", "aBcde16b": "NCDHW16c", "ba": "CN"}
_NCHW_TO_NHWC, _NHWC_TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


@dataclass(frozen=True)
class LayoutMoves:
    """What a target family's compiled graph says about layouts, declared on its target class (`layout_moves`):
    where the audit's facts come from, in words, and whether every transpose is a layout move (a Core ML program
    has no layout node kind; elsewhere only transposes the reader marks LAYOUT, or ORT's NHWC-domain ones, count)."""
    said_by: str = "the compiled graph's layout nodes"
    every_transpose: bool = False


LAYOUT_NODES = LayoutMoves()


def layout_name(tag: str | None) -> str | None:
    if not tag:
        return None
    tags = [t for t in tag.split(",") if t]
    return ", ".join(f"{_ONEDNN_TAGS[t]} ({t})" if t in _ONEDNN_TAGS else t for t in tags)


def _numpy(dtype: str | None) -> str:
    """OpenVINO's and the IR's dtype spellings as numpy names (bf16 as a 2-byte stand-in) for tensor_bytes."""
    d = (dtype or "float32").lower()
    return {"f32": "float32", "f16": "float16", "bf16": "uint16", "bfloat16": "uint16", "i64": "int64",
            "i32": "int32", "i8": "int8", "u8": "uint8", "fp16": "float16", "fp32": "float32",
            "boolean": "bool"}.get(d, d)


def _family(layout: str | None) -> str | None:
    """NCHW-like, NHWC-like or blocked, for counting transitions."""
    if not layout:
        return None
    if "c (" in layout or layout.startswith("NCHWc") or "8c" in layout or "16c" in layout:
        return "blocked"
    if layout.startswith(("NHWC", "NWC", "NDHWC")):
        return "channels-last"
    return "channels-first"


def layout_audit(g: Graph, family: LayoutMoves = LAYOUT_NODES) -> dict:
    """Node layouts and the moves between them, for one compiled graph of a target of this family."""
    producer = {t.name: n for n in g.nodes for t in n.outputs}
    layouts: dict[str, str] = {}
    for n in g.nodes:
        layout = _node_layout(n)
        if layout and n.kind == COMPUTE:
            layouts[n.id] = layout
    moves = []
    for n in g.nodes:
        move = _move(n, producer, family.every_transpose)
        if move is not None:
            moves.append(move)
    transitions = Counter(f"{m['from']} → {m['to']}" for m in moves
                          if m["from"] and m["to"] and _family(m["from"]) != _family(m["to"]))
    sized = [m["bytes"] for m in moves if m["bytes"] is not None]
    return {
        "node_layouts": dict(Counter(layouts.values()).most_common()),
        "layout_of": layouts,
        "moves": moves,
        "move_count": len(moves),
        "bytes_moved": int(sum(sized)),
        "unsized_moves": len(moves) - len(sized),
        "transitions": dict(transitions.most_common()),
        "said_by": family.said_by,
    }


def _node_layout(n) -> str | None:
    if n.domain == "openvino":
        return layout_name(n.attributes.get("outputLayouts"))
    if n.domain == "com.microsoft.nchwc":
        return "NCHWc (blocked)"
    return None


def _move(n, producer: dict, every_transpose: bool) -> dict | None:
    # A move writes what it reads: the output's shape, or the input's where the optimized model left the new
    # tensor untyped (ORT's blocked tensors); blocked layouts may pad channels, which is not counted.
    sized = [t for t in n.outputs[:1] + n.inputs[:1] if t.shape and all(isinstance(d, int) for d in t.shape)]
    tensor = sized[0] if sized else (n.outputs[0] if n.outputs else (n.inputs[0] if n.inputs else None))
    shape, dtype = (tensor.shape, tensor.dtype) if tensor is not None else (None, None)
    src = producer.get(n.inputs[0].name) if n.inputs else None
    if n.domain == "openvino" and n.op_type == "Reorder":
        before = src.attributes.get("outputLayouts") if src is not None else None
        in_dtype = n.inputs[0].dtype if n.inputs else None
        out = {"from": layout_name(before), "to": layout_name(n.attributes.get("outputLayouts"))}
        if in_dtype and dtype and in_dtype != dtype:
            out["precision"] = f"{in_dtype} → {dtype}"
    elif (n.op_type, n.domain) == ("ReorderInput", "com.microsoft.nchwc"):
        out = {"from": "NHWC" if n.attributes.get("channels_last") else "NCHW", "to": "NCHWc (blocked)"}
    elif (n.op_type, n.domain) == ("ReorderOutput", "com.microsoft.nchwc"):
        out = {"from": "NCHWc (blocked)", "to": "NHWC" if n.attributes.get("channels_last") else "NCHW"}
    elif n.op_type.lower() == "transpose" and (n.kind == LAYOUT or every_transpose
                                               or n.domain == "com.microsoft.nhwc"):
        perm = n.attributes.get("perm")
        perm = list(perm) if isinstance(perm, (list, tuple)) else None
        if perm == _NCHW_TO_NHWC:
            out = {"from": "NCHW", "to": "NHWC"}
        elif perm == _NHWC_TO_NCHW:
            out = {"from": "NHWC", "to": "NCHW"}
        else:
            out = {"from": None, "to": None, "perm": perm}
    elif n.kind == LAYOUT and n.op_type == "cpp_fused":
        out = {"from": None, "to": None, "what": "operand copy into the layout a library call wants"}
        tensor = n.inputs[0] if n.inputs else None
        shape, dtype = (tensor.shape, tensor.dtype) if tensor is not None else (None, None)
    else:
        return None
    return {"id": n.id, "op_type": n.op_type, **out, "shape": shape, "dtype": dtype,
            "bytes": tensor_bytes(shape, _numpy(dtype)), "module_path": n.module_path}
