"""A 20,000-node graph through the whole analysis, as the CLI runs it (isolated workers, --jobs = cores): does every
target finish within the default worker limits, how much of the work is xc's own, and how big is the run on disk.

    python bench/big_graph.py [--nodes 20000] [--targets all] [--jobs N] [--keep DIR]

The model is bench/models.py's flat transformer written straight as ONNX (19 nodes a layer; 1,053 layers make
20,007 nodes), the shape of a big upload without module paths. The analysis runs in a fresh child process; the
parent samples the child's whole process tree (the CLI's workers are forkserver children, so a parent-only timer
undercounts) for CPU time and peak memory.

Printed:
- each target's status and the time of each of its phases as its worker measured them (compile, inspect, run,
  profile, intermediates), its worker's own overhead (start, reading the captured graph, writing the result: the
  worker's span less its phases), and the stage views' cost against the compile (ORT's per-level sessions,
  OpenVINO's MOC copy — counted in inspect);
- the steps outside the targets: prepare (load, inputs, capture) and the report job;
- xc's own share: everything but the toolchains' calls — compile and run, the capture's export, and the calls xc
  makes inside its own phases (timed by the targets as "<phase>_toolchain": ORT's per-level and profiling sessions
  and their runs, OpenVINO's MOC pass, runtime model and profiled inferences) — summed over every worker (the
  work, not the wall, since targets run in parallel), and the wall time;
- the run's files, by kind: xc's own (report.json, report.nodes.json.gz, stages.json.gz, capture/) against the 20 MB
  goal, and the toolchains' artifacts (optimized models, IR, programs: each holds a copy of the weights).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.dirname(os.path.abspath(__file__))]
from tree_cpu import TreeSampler, run_sampled  # noqa: E402

NODES_PER_LAYER = 19
# Phases a target's worker reports: the toolchain's own calls, and xc's (reading back, profiling, probing).
TOOLCHAIN_PHASES = ("compile", "run")
# Timed inside xc's phases, not phases of their own: the stage views (inside inspect), and the toolchain's own calls
# made inside inspect and profile ("<phase>_toolchain": ORT's per-level and profiling sessions and their runs,
# OpenVINO's MOC pass, runtime model and profiled inferences), which count as the toolchain's.
WITHIN_PHASES = ("stage_views", "inspect_toolchain", "profile_toolchain")
FILES_GOAL_MB = 20


def _child(model: str, targets: list[str] | None, out: str, jobs: int | None) -> None:
    """Analyse in this process with isolated workers; one JSON line: events with times, and the report's
    per-target timings."""
    from xc_core.api import analyze
    from xc_core.targets import worker_modules
    from xc_core.worker import preload_only
    preload_only(worker_modules(targets))        # as `xc analyze` does
    events = []
    t0 = time.perf_counter()

    def progress(ev):
        events.append({"t": time.perf_counter() - t0, **ev.to_dict()})
    report = analyze(model, targets, out_dir=out, progress=progress, jobs=jobs)
    wall = time.perf_counter() - t0
    targets_out = {tid: {"status": t["status"], "error": t.get("error"), "timings": t.get("timings") or {}}
                   for tid, t in report["targets"].items()}
    print("XC-BIG " + json.dumps({"wall": wall, "events": events, "targets": targets_out,
                                  "nodes": report["capture"].get("onnx_node_count")}), flush=True)


def _spans(events: list[dict]) -> dict:
    """From the progress events: the start (the worker forkserver importing the toolchains, until the first step
    runs), prepare (load, inputs, capture), each target's worker span, the report job (after the last target)."""
    spans: dict = {"targets": {}, "start": events[0]["t"] if events else 0.0}
    for e in events:
        if e["step"] == "capture" and e["status"] == "done":
            spans["prepare"] = e["t"] - spans["start"]
        if e["step"] == "target":
            s = spans["targets"].setdefault(e.get("target"), {})
            if e["status"] == "running":
                s.setdefault("start", e["t"])
            else:
                s["end"] = e["t"]
        if e["step"] == "report" and e["status"] == "done":
            spans["report_end"] = e["t"]
    ends = [s["end"] for s in spans["targets"].values() if "end" in s]
    spans["report"] = spans.get("report_end", 0.0) - max(ends) if ends and "report_end" in spans else 0.0
    return spans


def _files(out: str) -> dict[str, int]:
    """Bytes of the run folder by part: report.json, the sidecar, stages, the Model Explorer export, the capture,
    the artifacts (per target), inputs."""
    parts: dict[str, int] = {}
    for folder, _, names in os.walk(out):
        rel = os.path.relpath(folder, out)
        for name in names:
            size = os.path.getsize(os.path.join(folder, name))
            top = rel.split(os.sep)[0]
            if rel == ".":
                key = name
            elif top == "artifacts":
                sub = rel.split(os.sep)
                key = "artifacts/" + (sub[1] if len(sub) > 1 else name)
            else:
                key = top + "/"
            parts[key] = parts.get(key, 0) + size
    return parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=20000, help="about this many ONNX nodes (default 20000)")
    ap.add_argument("--targets", default="all", help="comma-separated targets, or all (default)")
    ap.add_argument("--jobs", type=int, default=None, help="targets at once (default: the machine's cores)")
    ap.add_argument("--keep", metavar="DIR", help="keep the run folder here")
    ap.add_argument("--_child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        model, targets, out = args._child
        _child(model, None if targets == "all" else targets.split(","), out, args.jobs)
        return 0
    import models
    layers = max(1, round(args.nodes / NODES_PER_LAYER))
    with tempfile.TemporaryDirectory(prefix="xc-big-") as tmp:
        model = models.flat_transformer_onnx(os.path.join(tmp, f"flat{layers}.onnx"), layers)
        out = args.keep or os.path.join(tmp, "run")
        cmd = [sys.executable, __file__, "--_child", model, args.targets, out]
        if args.jobs:
            cmd += ["--jobs", str(args.jobs)]
        env = {**os.environ, "XC_HOME": os.path.join(tmp, "home")}
        load = os.getloadavg()
        stdout, stderr, sampler = run_sampled(cmd, cwd=ROOT, env=env)
        line = next((x for x in stdout.splitlines() if x.startswith("XC-BIG ")), None)
        if line is None:
            print(stderr[-3000:], file=sys.stderr)
            return 1
        r = json.loads(line.split(" ", 1)[1])
        files = _files(out)
    _print(r, files, sampler, load, args)
    return 0


def _print(r: dict, files: dict[str, int], sampler: TreeSampler, load, args) -> None:
    spans = _spans(r["events"])
    print(f"flat transformer ONNX, {r['nodes']:,} nodes · targets {args.targets} · jobs {args.jobs or os.cpu_count()}"
          f" · load average before {load[0]:.1f} on {os.cpu_count()} cores")
    print(f"wall {r['wall']:.1f} s · CPU of the whole process tree {sampler.cpu_seconds:.1f} s · peak RSS of the "
          f"tree {sampler.peak_rss / 2**30:.2f} GiB")
    toolchain = own = 0.0
    print(f"\n  {'target':22}{'status':8}{'worker s':>10}{'overhead':>10}  phases (s)")
    for tid, t in r["targets"].items():
        sp = spans["targets"].get(tid, {})
        span = sp.get("end", 0) - sp.get("start", 0) if sp else 0.0
        phases = {k: v for k, v in t["timings"].items() if k not in WITHIN_PHASES}
        views = t["timings"].get("stage_views")
        overhead = max(0.0, span - sum(phases.values()))
        inside = sum(v for k, v in t["timings"].items() if k.endswith("_toolchain"))
        toolchain += sum(v for k, v in phases.items() if k in TOOLCHAIN_PHASES) + inside
        own += sum(v for k, v in phases.items() if k not in TOOLCHAIN_PHASES) + overhead - inside
        cells = ", ".join(f"{k} {v:.1f}" for k, v in phases.items())
        if views is not None and phases.get("compile"):
            cells += f" · stage views {views:.1f} = {views / phases['compile']:.2f}× the compile (goal ≤ 0.5×)"
        if inside:
            cells += f" · the toolchain's calls inside inspect and profile {inside:.1f}"
        print(f"  {tid:22}{t['status']:8}{span:10.1f}{overhead:10.1f}  {cells}"
              + (f"\n  {'':22}↳ {t['error'][:160]}" if t["status"] != "ok" and t.get("error") else ""))
    prepare, report_s = spans.get("prepare", 0.0), spans["report"]
    own += report_s
    # Importing the toolchains (the forkserver's preload) and loading + capture (an ONNX upload: onnx.load and
    # the checks) are counted as the toolchain's: a bare script pays them too.
    toolchain += spans["start"] + prepare
    ok = sum(t["status"] == "ok" for t in r["targets"].values())
    print(f"\n  start (the workers' forkserver importing the toolchains) {spans['start']:.1f} s · prepare (load, "
          f"inputs, capture) {prepare:.1f} s · report job {report_s:.1f} s")
    print(f"  targets ok: {ok} of {len(r['targets'])}")
    print(f"  xc's own work {own:.1f} s of {own + toolchain:.1f} s summed over the workers: "
          f"{own / max(own + toolchain, 1e-9):.0%} (goal ≤ 25 %)")
    total = sum(files.values())
    # xc's own files (report, sidecar, step graphs, the capture's hand-offs) against the goal; the artifacts are the
    # toolchains' own outputs (each a copy of the weights: 27 MB for this model), kept as they wrote them.
    own_files = sum(v for k, v in files.items() if not k.startswith("artifacts/") and k != "inputs.npz")
    print(f"\n  files of the run: {total / 2**20:.1f} MB; xc's own (report, sidecar, stages, capture/) "
          f"{own_files / 2**20:.1f} MB (goal ≤ {FILES_GOAL_MB} MB); the toolchains' artifacts "
          f"{(total - own_files) / 2**20:.1f} MB")
    for k, v in sorted(files.items(), key=lambda kv: -kv[1]):
        if v >= 2**16:
            print(f"    {k:40}{v / 2**20:8.2f} MB")


if __name__ == "__main__":
    sys.exit(main())
