"""Model diff benchmark: the structural diff of a ~20,000-node model pair against the time of loading both runs.

    python bench/model_diff_bench.py [--nodes 20000] [--repeat 5] [--flat] [--no-weights]

The pair is bench/topology_bench.py's synthetic transformer (blocks.i.layer.j.{attn,mlp}, ONNX op types), each
MatMul reading its own weight (a record with a hash and a norm, as capture writes them). The new model has ONE edit
in the middle: a layer inserted into the middle block (renumbering the layers after it) — plus one retrained weight
in the last block. --flat drops every module path (a flat ONNX upload: the diff aligns one long sequence);
--no-weights drops the weight records (a run made before they were recorded: only op types tell repeated layers
apart, and the retrained weight cannot be seen). The reports hold no
target graphs (a real run's do, which makes loading slower and the ratio kinder: this is the harsher ratio).

Both reports are written to a temporary folder as report.json files, then, side by side in one process, each
--repeat times (median printed):
  - load: review.runs.load_run of both (read, parse, schema check, as a Report) — what `xc diff` does first;
  - parse: the floor of loading — json.load and as_report of both, no schema check;
  - diff: review.model_diff.model_diff_of_runs of the two loaded runs (model sides from the reports, match, compare).
Prints the medians, the ratios (the issue's goal: under 2×) and what the diff found (it must be the edit).
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

import topology_bench  # noqa: E402

INSERT_IN_LAYER = 4          # the inserted layer's index in the middle block


def _with_weights(graph: dict, retrain: str | None = None) -> tuple[dict, list[dict]]:
    """Each one-input MatMul gets a weight input named after where it sits (module path and its rank there: the
    name changes with renumbering, as a .pt2's placeholders do); records hash its made-up content."""
    records, rank = [], {}
    for n in graph["nodes"]:
        if n["op_type"] != "MatMul" or len(n["inputs"]) != 1:
            continue
        module = n["module_path"] or ""
        k = rank[module] = rank.get(module, -1) + 1
        name = f"{module}.w{k}" if module else f"w{k}"
        content = n["id"]       # the node's own weight: the same in both models however the layers are renumbered
        n["inputs"].append({"name": name, "shape": [768, 768], "dtype": "float32"})
        scale = 1.1 if name == retrain else 1.0
        records.append({"name": name, "graph_name": name, "module_path": module, "shape": [768, 768],
                        "dtype": "float32", "numel": 768 * 768,
                        "sha256": hashlib.sha256(f"{content}*{scale}".encode()).hexdigest(), "l2": 27.7 * scale})
    return graph, records


def _renumber(graph: dict, block: int, after: int) -> None:
    """Module paths of blocks.{block}.layer.{j} for j >= after move to j + 1 (a layer was inserted before them)."""
    prefix = f"blocks.{block}.layer."
    for n in graph["nodes"]:
        path = n["module_path"] or ""
        if path.startswith(prefix):
            j, _, rest = path[len(prefix):].partition(".")
            if int(j) >= after:
                n["module_path"] = f"{prefix}{int(j) + 1}" + (f".{rest}" if rest else "")


def model_pair(n_nodes: int) -> tuple[dict, dict, dict]:
    """Base and new captured graphs (with weight records), and what the diff must find."""
    blocks = max(3, round(n_nodes / (topology_bench.OPS_PER_LAYER * topology_bench.LAYERS_PER_BLOCK + 1)))
    base = topology_bench.source_graph(blocks)
    middle = blocks // 2
    # the new model: the middle block with one more layer, built by the same generator, spliced in
    with_extra = topology_bench.source_graph(1, topology_bench.LAYERS_PER_BLOCK + 1)
    per_layer = topology_bench.OPS_PER_LAYER
    start = 1 + middle * (topology_bench.LAYERS_PER_BLOCK * per_layer + 1) + INSERT_IN_LAYER * per_layer
    extra = copy.deepcopy(with_extra["nodes"][1 + INSERT_IN_LAYER * per_layer:1 + (INSERT_IN_LAYER + 1) * per_layer])
    new = copy.deepcopy(base)
    _renumber(new, middle, INSERT_IN_LAYER)
    for n in extra:              # ids unique in the new graph, module paths in the middle block
        n["id"] = f"inserted_{n['id']}"
        n["outputs"][0]["name"] = n["id"]
        n["module_path"] = n["module_path"].replace("blocks.0.", f"blocks.{middle}.", 1)
        n["inputs"] = [{**t, "name": f"inserted_{t['name']}"} for t in n["inputs"]]
    extra[0]["inputs"][0]["name"] = new["nodes"][start - 1]["outputs"][0]["name"]
    new["nodes"][start:start] = extra
    retrain = f"blocks.{blocks - 1}.layer.0.mlp.w0"
    base, base_weights = _with_weights(base)
    new, new_weights = _with_weights(new, retrain)
    expected = {"added": per_layer, "weights": 1, "inserted": f"blocks.{middle}.layer.{INSERT_IN_LAYER}",
                "renumbered": topology_bench.LAYERS_PER_BLOCK - INSERT_IN_LAYER}
    return {"graph": base, "weights": base_weights}, {"graph": new, "weights": new_weights}, expected


def _report(capture: dict, name: str, flat: bool, weights: bool) -> dict:
    graph = {**capture["graph"], "evidence": "measured"}
    if flat:
        for n in graph["nodes"]:
            n["module_path"] = None
        for w in capture["weights"]:
            w["module_path"] = None
    from collections import Counter

    from xc_core import __version__
    report = {"schema_version": "1.0", "xc_version": __version__, "created_at": "synthetic",
              "host": {"platform": "synthetic", "python": sys.version.split()[0], "versions": {}},
              "source": {"kind": "onnx", "name": name, "sha256": hashlib.sha256(name.encode()).hexdigest(),
                         "inputs": []},
              "inputs": {"origin": "seeded-random"},
              "reference": None,
              "capture": {"before_stage": "onnx", "op_count_before": len(graph["nodes"]),
                          "op_types_before": dict(Counter(n["op_type"] for n in graph["nodes"])), "graph": graph,
                          "evidence": "measured"},
              "targets": {},
              "checklist": {"targets": {}, "thresholds": {}}}
    if weights:
        report["capture"]["weights"] = capture["weights"]
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--flat", action="store_true", help="no module paths (a flat ONNX upload)")
    ap.add_argument("--no-weights", action="store_true", help="no weight records (a run made before them)")
    args = ap.parse_args(argv)

    from xc_core.review.model_diff import model_diff_of_runs
    from xc_core.review.runs import load_run
    from xc_core.views.typed_report import as_report

    def parse(path):
        with open(path) as f:
            return as_report(json.load(f))

    base, new, expected = model_pair(args.nodes)
    folder = tempfile.mkdtemp(prefix="model-diff-bench-")
    try:
        paths = []
        for capture, name in ((base, "base"), (new, "new")):
            os.makedirs(os.path.join(folder, name))
            path = os.path.join(folder, name, "report.json")
            with open(path, "w") as f:
                json.dump(_report(capture, f"transformer-{name}.onnx", args.flat, not args.no_weights), f)
            paths.append(path)
        load_s, runs = topology_bench._median(lambda: [load_run(p) for p in paths], args.repeat)
        parse_s, _ = topology_bench._median(lambda: [parse(p) for p in paths], args.repeat)
        diff_s, diff = topology_bench._median(lambda: model_diff_of_runs(*runs), args.repeat)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    nodes = (len(base["graph"]["nodes"]), len(new["graph"]["nodes"]))
    print(f"model pair: {nodes[0]:,} / {nodes[1]:,} nodes, {len(base['weights'])} weights each"
          f"{', flat (no module paths)' if args.flat else ''}{', no weight records' if args.no_weights else ''}")
    print(f"  load both runs (load_run × 2)  median {load_s * 1000:8.1f} ms")
    print(f"  parse both (json + as_report)  median {parse_s * 1000:8.1f} ms")
    print(f"  model diff (model_diff_of_runs) median {diff_s * 1000:8.1f} ms")
    print(f"  ratio diff / load: {diff_s / load_s:.2f}×, diff / parse: {diff_s / parse_s:.2f}× (goal < 2×)")
    s = diff["summary"]
    found = {k: v for k, v in s.items() if v}
    print(f"  found: {found}; blocks {[b['module_path'] for b in diff['blocks']]}; "
          f"renamed {len(diff['renamed_modules'])} ({', '.join(sorted({r['why'] for r in diff['renamed_modules']}))})")
    want_summary = {"added": expected["added"]} if args.no_weights else \
        {"added": expected["added"], "weights": expected["weights"]}
    ok = diff["comparable"] and found == want_summary
    if not args.flat and not args.no_weights:    # without weights, any of the look-alike layers may be "the" new one
        ok = ok and [b["module_path"] for b in diff["blocks"]] == [expected["inserted"]] and \
            sum(r["why"] == "renumbered" for r in diff["renamed_modules"]) == expected["renumbered"]
    print(f"  the edit exactly: {'yes' if ok else 'NO (expected ' + json.dumps(expected) + ')'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
