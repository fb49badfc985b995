"""Vela's per-layer report traced back to the Edge ops of an Ethos-U delegate.

Three files per delegate, written while it was lowered (ethos_u.py keeps each delegate's in a folder of its own):
- `debug.json`, the Arm backend's debug dump (ArmCompileSpec.DebugMode.JSON, executorch/backends/arm/debug/
  schema.py): one event per TOSA op in serialization order — the op's output name (`tosa_info.node_name`), its
  TOSA operator, and the FX node it was made from with that node's provenance (`torch_info.node_trace`: the names of
  the nodes it came from, newest first, through every pass back to torch.export's graph);
- `output/out_per-layer.csv`, Vela's `--verbose-performance` table: per layer of the command stream its original
  TOSA operator, the NPU operator Vela made, NPU or CPU, SRAM staging, op cycles and share of the network's cycles,
  MACs and utilisation, and a name — the output tensor of the layer's fused pass (a TOSA op's name, plus a suffix
  where Vela added the layer itself: "_transpose", "_reducesum"; "#N" where Vela made a nameless tensor);
- `output/out_summary_<system config>.csv`: the network's totals (clock, SRAM/flash used, bandwidths, cycles).

Tracing: a layer belongs to the TOSA op of its original operator nearest in serialization order to the op its name
points at (Vela names a fused pass after its last op: the linear's CONV2D in a pass ending in TABLE is named after
the table), and a TOSA op to the delegate's Edge op whose provenance shares its first traced name (the edge op
`aten_sum_dim_int_list` came from `sum_1`, as did the TOSA REDUCE_SUM). A TOSA op a pass made with no provenance
(the TABLE a GELU becomes) goes to the next Edge op in program order that has no TOSA op yet.
"""
from __future__ import annotations

import csv
import glob
import json
import os
import re
from dataclasses import dataclass, field

_QDQ = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel")


@dataclass
class VelaDelegate:
    """What the TOSA lowering and Vela said about one delegate."""
    tosa_ops: list[tuple[str, str]]            # (output name, TOSA operator: CONV2D), in serialization order
    tosa_owner: dict[str, tuple[str | None, str]]   # TOSA op name → (the Edge op it came from, how matched)
    layers: list[dict]                         # Vela's per-layer rows (numbers parsed)
    summary: dict                              # the network's totals
    tosa_program: bytes = b""                  # the TOSA flatbuffer Vela compiled
    processed_bytes: bytes = b""               # the delegate's payload (matches it to its lowered module)
    unattributed_us: float = 0.0               # layers traced to no Edge op
    notes: list[str] = field(default_factory=list)
    events: list[dict] = field(default_factory=list, repr=False)    # debug.json as read
    edges: list[tuple[str, list[str]]] = field(default_factory=list, repr=False)  # the delegate's Edge ops


def _operator_key(name: str) -> str:
    """"Op.CONV2D" / "tosa.CONV2D.default" / Vela's "Conv2D" / "DepthwiseConv2D" → "conv2d"/"depthwiseconv2d"."""
    name = name.split(".")[1] if name.startswith("tosa.") else name.removeprefix("Op.")
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _edge_chains(lowered) -> list[tuple[str, list[str]]]:
    """Each compute Edge op of the delegate (quantize/dequantize left out: the backend folds them into rescales):
    (its name, its provenance names, newest first)."""
    out = []
    for n in lowered.original_module.graph.nodes:
        if n.op != "call_function" or any(q in str(n.target) for q in _QDQ) or "getitem" in str(n.target):
            continue
        names, stack = [n.name], list(n.meta.get("from_node") or [])
        while stack:
            src = stack.pop(0)
            names.append(src.name)
            stack.extend(src.from_node)
        out.append((n.name, names))
    return out


def _trace_tosa_ops(events: list[dict], edges: list[tuple[str, list[str]]], module: str):
    """TOSA op name → (Edge node id, how it was matched), by shared provenance names; see the module docstring."""
    owner: dict[str, tuple[str | None, str]] = {}
    order = [name for name, _ in edges]
    last_at = -1          # the Edge op of the TOSA op just before (ops are serialized in program order)
    for e in events:
        tosa_name = (e.get("tosa_info") or {}).get("node_name") or e["aten_info"]["node_name"]
        trace = e["torch_info"].get("node_trace")
        names = [e["aten_info"]["node_name"]] + ([t["name"] for t in trace] if isinstance(trace, list) else [])
        best = None
        for name in names:
            hits = [(chain.index(name), i) for i, (_, chain) in enumerate(edges) if name in chain]
            if hits:
                best = min(hits)[1]
                break
        how = "provenance"
        if best is None:
            # Made by a pass with no provenance: the next Edge op after the previous TOSA op's without one yet.
            taken = {o for o, _ in owner.values()}
            best = next((i for i in range(last_at + 1, len(order)) if f"{module}/{order[i]}" not in taken),
                        last_at if last_at >= 0 else None)
            how = "program order"
        if best is not None:
            last_at = best
            owner[tosa_name] = (f"{module}/{order[best]}", how)
        else:
            owner[tosa_name] = (None, "not traced")
    return owner


def _number(text: str):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return text
    return int(value) if value.is_integer() and "." not in text else value


def read_vela_dir(folder: str, lowered) -> VelaDelegate:
    """One delegate's debug dump and Vela output, read."""
    with open(os.path.join(folder, "debug.json"), encoding="utf-8") as f:
        events = json.load(f)
    with open(os.path.join(folder, "output", "out_per-layer.csv"), newline="", encoding="utf-8") as f:
        layers = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]
    summaries = glob.glob(os.path.join(folder, "output", "out_summary_*.csv"))
    summary: dict = {}
    if summaries:
        with open(summaries[0], newline="", encoding="utf-8") as f:
            row = next(csv.DictReader(f), {}) or {}
        raw = {k: _number(v) for k, v in row.items()}
        summary = {"accelerator_configuration": raw.get("accelerator_configuration"),
                   "system_config": raw.get("system_config"), "memory_mode": raw.get("memory_mode"),
                   "core_clock_hz": raw.get("core_clock"),
                   "sram_used_kib": raw.get("sram_memory_used"),
                   "off_chip_flash_used_kib": raw.get("off_chip_flash_memory_used"),
                   "on_chip_flash_used_kib": raw.get("on_chip_flash_memory_used"),
                   "dram_used_kib": raw.get("dram_memory_used"),
                   "sram_total_bytes": raw.get("sram_total_bytes"),
                   "off_chip_flash_total_bytes": raw.get("off_chip_flash_total_bytes"),
                   "dram_total_bytes": raw.get("dram_total_bytes"),
                   "inference_time_s": raw.get("inference_time"),
                   "macs": raw.get("nn_macs"), "cycles_npu": raw.get("cycles_npu"),
                   "cycles_total": raw.get("cycles_total")}
    summary["npu_operators"] = sum(1 for r in layers if r.get("Target") == "NPU")
    summary["cpu_operators"] = sum(1 for r in layers if r.get("Target") == "CPU")
    tosa_ops = [((e.get("tosa_info") or {}).get("node_name") or e["aten_info"]["node_name"],
                 _operator_key(e["aten_info"]["operator_name"])) for e in events]
    program = b""
    tosa_path = os.path.join(folder, "out.tosa")
    if os.path.exists(tosa_path):
        with open(tosa_path, "rb") as f:
            program = f.read()
    return VelaDelegate(tosa_ops=tosa_ops, tosa_owner={}, layers=layers, summary=summary, tosa_program=program,
                        processed_bytes=bytes(lowered.processed_bytes), events=events, edges=_edge_chains(lowered))


def _layer_op(row: dict, tosa_ops: list[tuple[str, str]]) -> str | None:
    """The TOSA op a Vela layer belongs to (see the module docstring)."""
    name = str(row.get("Name") or "")
    names = [t for t, _ in tosa_ops]
    named = max((i for i, t in enumerate(names) if name == t or name.startswith(t + "_")),
                key=lambda i: len(names[i]), default=None)
    wanted = _operator_key(str(row.get("Original Operator") or ""))
    same_kind = [i for i, (_, op) in enumerate(tosa_ops) if op == wanted]
    if named is None:
        return names[same_kind[0]] if len(same_kind) == 1 else None
    if tosa_ops[named][1] == wanted or not same_kind:
        return names[named]
    # nearest of the layer's own kind; before the named op on a tie (a fused pass is named after its last op)
    return names[min(same_kind, key=lambda i: (abs(i - named), i > named))]


def attribute_layers(vd: VelaDelegate, module: str) -> dict[str, dict]:
    """Edge node id → its Vela figures: µs (cycles at the clock), cycles, share of the network's cycles, MACs, the
    layers ("Conv2D→Conv2D"), which of them Vela put on the CPU. Fills `vd.tosa_owner` and `vd.unattributed_us`."""
    vd.tosa_owner = _trace_tosa_ops(vd.events, vd.edges, module)
    clock = vd.summary.get("core_clock_hz") or None
    out: dict[str, dict] = {}
    unattributed_cycles = 0
    for row in vd.layers:
        op = _layer_op(row, vd.tosa_ops)
        nid = vd.tosa_owner.get(op, (None, ""))[0] if op else None
        cycles = row.get("Op Cycles") if isinstance(row.get("Op Cycles"), (int, float)) else 0
        if nid is None:
            unattributed_cycles += cycles
            continue
        e = out.setdefault(nid, {"cycles": 0, "network_share": 0.0, "macs": 0, "layers": [], "cpu_layers": [],
                                 "tosa_ops": [], "us": None})
        e["cycles"] += cycles
        e["network_share"] = round(e["network_share"] + float(row.get("Network% (cycles)") or 0) / 100, 4)
        e["macs"] += int(row.get("MAC Count") or 0)
        layer = f"{row.get('Original Operator')}→{row.get('NNG Operator')}"
        e["layers"].append(layer)
        if op not in e["tosa_ops"]:
            e["tosa_ops"].append(op)
        if row.get("Target") == "CPU":
            e["cpu_layers"].append(f"TOSA {row.get('Original Operator')} ({row.get('Name')})")
    # A TOSA op that became no layer of the command stream (a reshape Vela turns into addressing) costs nothing
    # by Vela's own account: 0 cycles, said so.
    for op, (nid, _) in vd.tosa_owner.items():
        if nid is not None and nid not in out:
            out[nid] = {"cycles": 0, "network_share": 0.0, "macs": 0, "layers": [], "cpu_layers": [],
                        "tosa_ops": [op], "us": None,
                        "note": "no layer of Vela's command stream: Vela removed it (e.g. a reshape, an address change)"}
        elif nid is not None and op not in out[nid]["tosa_ops"]:
            out[nid]["tosa_ops"].append(op)
    if clock:
        for e in out.values():
            e["us"] = round(e["cycles"] / clock * 1e6, 4)
        vd.unattributed_us = round(unattributed_cycles / clock * 1e6, 4)
    if unattributed_cycles:
        vd.notes.append(f"{unattributed_cycles} cycles of Vela layers traced to no Edge op (layers Vela made "
                        "itself, e.g. a layout transpose at the delegate's input)")
    return out
