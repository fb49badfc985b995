"""The worker entry of isolation and culprit search for one target (run in an isolated worker with the usual
limits, like every target): the captured ExportedProgram and the inputs from the run folder, the reference's
value at every op, per-op isolation, and — when asked — culprit search and the repro bundle. The block goes to
`isolation.json` in the job folder (it can be large: one row per op)."""
from __future__ import annotations

import importlib
import json
import os

from ..limits import Limits
from ..paths import write_json_atomic

BLOCK_FILE = "isolation.json"
PROGRAM = "exported_program.pt2"       # the captured ExportedProgram, in the run folder's capture/


def _by_program_node(args: dict, origin: dict, ep) -> dict:
    """The report's per-op facts (keyed by ONNX node) keyed by the route program's nodes: each program node gets its
    ONNX node's type and module path and the compiled nodes that compute it; the error carried in the full run
    goes to the last program node of its ONNX node (the one whose value is the ONNX node's output)."""
    info, carried, nodes_of = args.get("op_info") or {}, args.get("carried") or {}, args.get("nodes_of") or {}
    last = {}
    for n in ep.graph.nodes:
        if n.name in origin:
            last[origin[n.name]] = n.name
    return {"op_info": {p: info[o] for p, o in origin.items() if o in info},
            "nodes_of": {p: nodes_of[o] for p, o in origin.items() if o in nodes_of},
            "carried": {last[o]: v for o, v in carried.items() if o in last}}


def _in_onnx_names(block: dict, origin: dict) -> None:
    for row in block["ops"]:
        row["program_node"] = row["source_op"]
        row["source_op"] = origin.get(row["source_op"], row["source_op"])
    block["above_gate"] = list(dict.fromkeys(origin.get(o, o) for o in block["above_gate"]))
    for row in block["not_isolated"]:
        row["program_node"] = row["source_op"]
        row["source_op"] = origin.get(row["source_op"], row["source_op"])


def isolate_job(args: dict, workdir: str, phase) -> dict:
    import time
    started = time.perf_counter()
    from ..pipeline.plan import CAPTURE_DIR
    from ..pipeline.run_folder import read_feeds
    from ..sources.pt2_archive import load_pt2
    from .isolate import isolate_ops
    from .regions import reference_values

    module, name = args["target_class"].split(":")
    target = getattr(importlib.import_module(module), name)(**args.get("options", {}))
    target.limits = Limits(**args["limits"])
    phase("load")
    ep, _ = load_pt2(os.path.join(args["run_dir"], args.get("program") or os.path.join(CAPTURE_DIR, PROGRAM)),
                     target.limits)
    feeds = read_feeds(args["run_dir"])
    user_inputs = [feeds[n] for n in args["input_names"]]
    values = reference_values(ep, user_inputs)
    # An ONNX source's routed target compiles the route's program: its nodes are named in the ONNX model's through
    # the route's `origin` (program node -> ONNX node), as the target's own report is.
    origin = args.get("origin")
    by_program = _by_program_node(args, origin, ep) if origin else args
    phase("isolate")
    block = isolate_ops(target, ep, values, os.path.join(workdir, "isolate"), args["gates"],
                        carried=by_program.get("carried"), nodes_of=by_program.get("nodes_of"),
                        op_info=by_program.get("op_info"))
    block["evidence"] = args.get("evidence")
    if origin:
        _in_onnx_names(block, origin)
    # Written now as well: if the search is killed at the worker's limits, the isolation still stands.
    write_json_atomic(os.path.join(workdir, BLOCK_FILE), block)
    if args.get("search"):
        phase("search")
        if args.get("timeout_s"):
            # What is left of the worker's limit, less the longest trial so far (the island compile) and a margin.
            spent = time.perf_counter() - started
            args["budget_s"] = max(0.0, args["timeout_s"] * 0.9 - spent - block["seconds"])
        block["culprit"] = _culprit(target, ep, values, user_inputs, workdir, {**args, **by_program}, block)
        if origin and block["culprit"].get("ops"):
            block["culprit"]["program_ops"] = list(block["culprit"]["ops"])
            block["culprit"]["ops"] = list(dict.fromkeys(origin.get(o, o) for o in block["culprit"]["ops"]))
    write_json_atomic(os.path.join(workdir, BLOCK_FILE), block)
    return {"ops": len(block["ops"]), "culprit": (block.get("culprit") or {}).get("status")}


def _culprit(target, ep, values, user_inputs, workdir, args, block) -> dict:
    from .repro import write_bundle
    from .search import find_culprit
    from .sentence import culprit_sentence
    # The search stops starting trials in time to write its answer before the worker's limit kills it.
    budget = args.get("budget_s")
    culprit = find_culprit(target, ep, values, user_inputs, os.path.join(workdir, "search"), args["gates"],
                           budget_s=budget)
    search = culprit.pop("_search")
    if culprit["status"] != "found":
        return culprit
    info = args.get("op_info") or {}
    culprit["op_types"] = [info.get(op, {}).get("op_type") or _aten_name(ep, op) for op in culprit["ops"]]
    culprit["module_paths"] = list(dict.fromkeys(p for p in (info.get(op, {}).get("module_path")
                                                             for op in culprit["ops"]) if p))
    local = [r["local"] for r in block["ops"] if (r.get("program_node") or r["source_op"]) in set(culprit["ops"])]
    culprit["local"] = max(local, key=lambda f: (f["non_finite"], f["rel_l2"] or 0.0)) if local else None
    culprit["sentence"] = culprit_sentence(args["identity"], culprit, block, values,
                                           args.get("declared_precisions") or [])
    window = culprit.pop("window", None)
    folder = culprit.pop("folder", None)
    rel = os.path.join("artifacts", args["folder_name"], "repro")
    try:
        culprit["repro"] = write_bundle(os.path.join(args["run_dir"], rel), rel, search, culprit, window, folder,
                                        args["identity"], target.id, args.get("options", {}), args.get("evidence"))
    except Exception as e:  # noqa: BLE001 — the culprit stands without its bundle; say why there is none
        from ..errors import first_line
        culprit["repro"] = {"folder": rel, "files": [], "script": None,
                            "no_script": f"the repro bundle could not be written: {first_line(e, 200)}",
                            "tracker": None}
    return culprit


def _aten_name(ep, op: str) -> str:
    node = next((n for n in ep.graph.nodes if n.name == op), None)
    target = getattr(node, "target", None)
    return getattr(target, "__name__", str(target)) if node is not None else op


def read_block(workdir: str) -> dict:
    with open(os.path.join(workdir, BLOCK_FILE)) as f:
        return json.load(f)
