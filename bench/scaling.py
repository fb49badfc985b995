"""How xc's time grows with the graph: the same analysis on one model family at growing sizes, each size in a fresh
process, --repeat times (median), with the seconds and the time per node of every stage, and the per-node ratio
between the largest and the smallest size (1.0: linear; 16.0 over a 16× range: quadratic), and the marginal ratio:
what an added node costs between the two largest sizes against between the two smallest (fixed costs cancel; 1.0 is
flat).

    python bench/scaling.py                                   # transformer 1, 4, 16, 64 layers
    python bench/scaling.py --family cnn --sizes 4,16,64      # conv-BN-ReLU depth
    python bench/scaling.py --family lstm --sizes 10,40,160   # a 3-layer LSTM over that many steps
    python bench/scaling.py --family flat --sizes 66,263,1053 # flat ONNX transformer: 1,254 → 20,007 nodes
    python bench/scaling.py --targets ort-cpu,coreml-ane --profile /tmp/prof   # + a cProfile file per run

Stages, from the report and the progress events of one in-process `analyze`:
- capture: loading, input resolution and capture (torch.export + ONNX export for a PyTorch model, the ONNX
  reading for every source);
- <target>.compile / .inspect / .run / .intermediates: the target's own timings (compile includes its
  toolchain: ct.convert, ORT's session, OpenVINO's compile_model, quantize_dynamic);
- report: the analyses and the report (drift, alignment, fusion, checklist, stages, validation, writing).
xc's own stages are inspect (own) — inspect without the toolchain calls it makes for the stage views — and
report: reading back and comparing. Nodes = the largest graph of the run: the captured
graph (ONNX nodes or ExportedProgram ops) or a target's program (for the LSTM, Core ML's unrolled MIL ops). The
criterion issue 14 sets: per-node ratio ≤ 1.5 from 1× to 16×.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.dirname(os.path.abspath(__file__))]
DEFAULT_SIZES = {"transformer": "1,4,16,64", "cnn": "4,16,64", "lstm": "10,40,160", "flat": "66,263,1053"}
OWN = (".inspect (own)", "report")     # stage names (suffixes) that are xc's own work
# Timed inside inspect: the toolchain's own calls made for the stage views (ORT's per-level sessions, OpenVINO's
# MOC pass). inspect minus them is xc's own read-back, "<target>.inspect (own)".
INSPECT_TOOLCHAIN = "inspect_toolchain"
MIN_INTERVAL_S = 0.1    # the marginal ratio counts towards the worst only when its first interval is at least this


def _one(family: str, size: int, targets: list[str] | None, profile: str | None, isolated: bool) -> None:
    """Child mode: analyse the model (built by another process: exporting it here leaves torch state behind that
    made Core ML's run_decompositions of an LSTM minutes slower) in this process, or `isolated` as the CLI runs it
    (workers, one job at a time so the stages do not share the cores); the stage times as one JSON line."""
    from xc_core.api import analyze
    if isolated:
        from xc_core.targets import worker_modules
        from xc_core.worker import preload_only
        preload_only(worker_modules(targets))
        if profile:
            os.environ["XC_PROFILE_DIR"] = os.path.join(profile, f"{family}{size}")   # a cProfile file per job
    with tempfile.TemporaryDirectory(prefix="xc-scaling-") as tmp:
        path = os.path.join(tmp, f"{family}{size}" + (".onnx" if family == "flat" else ".pt2"))
        subprocess.run([sys.executable, __file__, "--_build", f"{family}:{size}", path], check=True, cwd=ROOT,
                       capture_output=True)
        marks = {}

        def progress(ev):
            now = time.perf_counter()
            if ev.step == "capture" and ev.status == "done":
                marks["capture"] = now
            elif ev.step == "target" and ev.status != "running":
                marks["targets"] = now
            elif ev.step == "report" and ev.status == "done":
                marks["report"] = now
        prof = None
        if profile and not isolated:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        t0 = time.perf_counter()
        report = analyze(path, targets, out_dir=os.path.join(tmp, "run"), isolate=isolated, jobs=1,
                         progress=progress)
        wall = time.perf_counter() - t0
        if prof is not None:
            prof.disable()
            os.makedirs(profile, exist_ok=True)
            prof.dump_stats(os.path.join(profile, f"{family}{size}.prof"))
        stages = {"capture": marks["capture"] - t0, "report": marks["report"] - marks.get("targets", marks["capture"])}
        errors = {}
        for identity, t in report["targets"].items():
            timings = t.get("timings") or {}
            for k, v in timings.items():
                stages[f"{identity}.{k}"] = v
            if "inspect" in timings:
                stages[f"{identity}.inspect (own)"] = timings["inspect"] - timings.get(INSPECT_TOOLCHAIN, 0.0)
            if t["status"] != "ok":
                errors[identity] = t["error"]
        sizes = {"report_mb": os.path.getsize(os.path.join(tmp, "run", "report.json")) / 2**20}
        for key, name in (("stages_mb", "stages.json.gz"), ("sidecar_mb", "report.nodes.json.gz")):
            path = os.path.join(tmp, "run", name)
            if os.path.exists(path):
                sizes[key] = os.path.getsize(path) / 2**20
    # The size xc's read-back handles: the largest graph of the run. For the LSTM that is Core ML's unrolled MIL
    # program (the ONNX graph keeps one LSTM node whatever the number of steps).
    counts = [report["capture"].get("onnx_node_count") or 0, report["capture"].get("op_count_before") or 0]
    for t in report["targets"].values():
        counts += [t.get("op_count_after") or 0, (t.get("info") or {}).get("mil_ops_before") or 0]
    print("XC-SCALING " + json.dumps({"nodes": max(counts), "wall": wall,
                                      "stages": stages, "errors": errors, **sizes}), flush=True)


def _spawn(family, size, targets, profile, isolated) -> dict:
    cmd = [sys.executable, __file__, "--_one", f"{family}:{size}"] + (["--isolated"] if isolated else [])
    if targets:
        cmd += ["--targets", ",".join(targets)]
    if profile:
        cmd += ["--profile", profile]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("XC-SCALING ")), None)
    if line is None:
        raise SystemExit(f"{family} {size} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line.split(" ", 1)[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=sorted(DEFAULT_SIZES), default="transformer")
    ap.add_argument("--sizes", help="comma-separated sizes (layers, depth, steps); default per family")
    ap.add_argument("--targets", help="comma-separated targets (default: all)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per size, interleaved; medians (default 3)")
    ap.add_argument("--profile", metavar="DIR", help="write a cProfile file per size there (--isolated: per job)")
    ap.add_argument("--isolated", action="store_true",
                    help="analyse as the CLI does, in workers forked from a forkserver that froze its imports "
                         "(gc.freeze), one job at a time; default: in the measuring process")
    ap.add_argument("--_one", help=argparse.SUPPRESS)
    ap.add_argument("--_build", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    targets = [t for t in (args.targets or "").split(",") if t] or None
    if args._build:
        import models
        family, size = args._build[0].split(":")
        models.BUILDERS[family](args._build[1], int(size))
        return 0
    if args._one:
        family, size = args._one.split(":")
        _one(family, int(size), targets, args.profile, args.isolated)
        return 0
    sizes = [int(s) for s in (args.sizes or DEFAULT_SIZES[args.family]).split(",")]
    runs: dict[int, list[dict]] = {s: [] for s in sizes}
    for _ in range(args.repeat):
        for s in sizes:                               # interleaved: every size sees the same machine load
            runs[s].append(_spawn(args.family, s, targets, args.profile, args.isolated))
    nodes = {s: runs[s][0]["nodes"] for s in sizes}
    names = sorted({k for v in runs.values() for r in v for k in r["stages"]},
                   key=lambda k: (k != "capture", k == "report", k))
    med = {s: {k: statistics.median(r["stages"].get(k, 0.0) for r in runs[s]) for k in names} for s in sizes}
    print(f"{args.family} · sizes {', '.join(map(str, sizes))} · targets {args.targets or 'all'} · "
          f"median of {args.repeat}, each in a fresh process"
          + (", isolated workers one at a time" if args.isolated else ", in process"))
    print(f"  nodes: " + ", ".join(f"{s} → {nodes[s]:,}" for s in sizes))
    lo, hi = sizes[0], sizes[-1]
    head = "  " + f"{'stage':34}" + "".join(f"{str(s) + ' s':>10}{'µs/node':>10}" for s in sizes) + \
        f"{'per-node ratio':>16}{'marginal ratio':>16}"
    print(head)
    worst = worst_marginal = None
    for k in names + ["wall"]:
        cells = ""
        v = {s: statistics.median(r["wall"] for r in runs[s]) if k == "wall" else med[s][k] for s in sizes}
        for s in sizes:
            cells += f"{v[s]:10.2f}{v[s] / nodes[s] * 1e6:10.0f}"
        ratio = (v[hi] / nodes[hi]) / (v[lo] / nodes[lo]) if v[lo] > 0 else float("nan")
        # The marginal cost per node (what each added node costs, fixed costs aside) between the two largest sizes
        # against the two smallest: 1.0 is flat; the goal for xc's own stages is ≤ 1.2.
        marginal = float("nan")
        if len(sizes) >= 3 and nodes[sizes[1]] > nodes[lo] and nodes[hi] > nodes[sizes[-2]]:
            first = (v[sizes[1]] - v[lo]) / (nodes[sizes[1]] - nodes[lo])
            last = (v[hi] - v[sizes[-2]]) / (nodes[hi] - nodes[sizes[-2]])
            marginal = last / first if first > 0 else float("nan")
        own = k.endswith(OWN)
        if own and v[hi] >= 0.5:             # below half a second the per-node figure is noise
            worst = ratio if worst is None else max(worst, ratio)
            # A marginal ratio whose first interval is a few hundredths of a second is the noise's ratio.
            if marginal == marginal and v[sizes[1]] - v[lo] >= MIN_INTERVAL_S:
                worst_marginal = marginal if worst_marginal is None else max(worst_marginal, marginal)
        print(f"  {k + (' *' if own else ''):34}{cells}{ratio:16.2f}{marginal:16.2f}")
    if worst is None:
        print("  * xc's own stage. None of them reached 0.5 s at the largest size (below that the per-node figure "
              "is noise)")
    else:
        print(f"  * xc's own stage. Worst per-node ratio of xc's own stages (those ≥ 0.5 s): {worst:.2f} over "
              f"{nodes[hi] / nodes[lo]:.1f}× the nodes; worst marginal ratio "
              + (f"{worst_marginal:.2f} (goal ≤ 1.2)" if worst_marginal is not None else "— (needs 3 sizes)"))
    for s in sizes:
        r = runs[s][-1]
        extra = (f", report.nodes.json.gz {r['sidecar_mb']:.1f} MB" if "sidecar_mb" in r else "") + \
            (f", stages.json.gz {r['stages_mb']:.1f} MB" if "stages_mb" in r else "")
        print(f"  size {s}: report.json {r['report_mb']:.2f} MB{extra}"
              + (f"; errors: {r['errors']}" if r["errors"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
