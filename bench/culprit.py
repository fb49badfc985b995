"""What per-op isolation and culprit search cost next to the analysis they extend: for each model, one analysis of
the given targets, then `isolate_report` on that run (every target isolated; the search where a target's output
drift is above its gate), timed side by side in one process, --repeat times, medians and their ratio.

    python bench/culprit.py [--models sample:vision-mini,sample:tts-mini] [--targets ort-cpu,coreml-ane,coreai-ane]
                            [--repeat 3] [--gate rel_l2=1e-3]

Per target it also prints the isolation's own seconds (the island program's compile and run), the search's trial
compiles and seconds, and what was found. `--gate rel_l2=1e-3` makes the search run on targets whose drift is
fp16's (about 5e-4) or more: the cost of a search, not only of isolation.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="sample:vision-mini,sample:tts-mini,sample:transformer-mini")
    p.add_argument("--targets", default="ort-cpu,openvino-cpu,coreml-ane,coreai-ane,litert-xnnpack")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--gate", action="append", metavar="NAME=VALUE")
    args = p.parse_args()
    from xc_core.api import analyze, default_jobs
    from xc_core.culprit.metrics import parse_gates
    from xc_core.culprit.run import isolate_report
    gates = parse_gates(args.gate) if args.gate else None
    targets = args.targets.split(",")
    print(f"targets: {', '.join(targets)}; gates: {gates or 'each target default'}; repeat {args.repeat}")
    for model in args.models.split(","):
        analysis, isolation, last = [], [], None
        for _ in range(args.repeat):
            folder = tempfile.mkdtemp(prefix="culprit-bench-")
            try:
                t0 = time.perf_counter()
                report = analyze(model, targets, out_dir=folder)
                t1 = time.perf_counter()
                isolate_report(report, folder, gates=gates, jobs=default_jobs())   # as many workers as analyze
                t2 = time.perf_counter()
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            analysis.append(t1 - t0)
            isolation.append(t2 - t1)
            last = report
        a, i = statistics.median(analysis), statistics.median(isolation)
        print(f"\n{model}: analysis {a:.1f} s, isolation + search {i:.1f} s (medians of {args.repeat}): "
              f"{i / a:.2f}× the analysis")
        for tid, t in (last or {}).get("targets", {}).items():
            iso = t.get("isolation")
            if not iso:
                continue
            culprit = iso.get("culprit") or {}
            found = culprit.get("sentence") or culprit.get("why") or "no search (within the gate)"
            print(f"  {tid:22s} isolated {iso.get('isolated', 0):4d} op(s) in {iso.get('seconds') or 0:6.1f} s"
                  f"{'  ' + iso['error'] if iso.get('error') else ''}; search: {culprit.get('runs', 0)} trial(s), "
                  f"{culprit.get('seconds') or 0:.1f} s — {found}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
