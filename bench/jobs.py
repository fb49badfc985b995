"""Parallel targets: `analyze --targets all` on a bundled sample with --jobs 1 and --jobs 2, alternated in one
run (so both see the same machine load), medians of --repeat runs each, and whether the reports agree apart from
timings.

    python bench/jobs.py [--sample tts-mini] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", default="tts-mini")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from test_workers import _comparable
    from xc_core.api import analyze
    from xc_core.targets import target_ids
    # OpenVINO pinned to f32 so bf16-capable CPUs compare like the others.
    options = {"openvino-cpu": {"inference_precision": "f32"}}
    analyze(f"sample:{args.sample}", ["ort-cpu"])   # warm the forkserver and the page cache, not measured
    times = {1: [], 2: []}
    reports = {}
    for _ in range(args.repeat):
        for jobs in (1, 2):
            t0 = time.perf_counter()
            reports[jobs] = analyze(f"sample:{args.sample}", target_ids(), jobs=jobs, target_options=options)
            times[jobs].append(time.perf_counter() - t0)
    m1, m2 = statistics.median(times[1]), statistics.median(times[2])
    same = _comparable(reports[1]) == _comparable(reports[2])
    print(f"sample:{args.sample}, {len(target_ids())} targets + reference, {args.repeat} runs each")
    print(f"--jobs 1: median {m1:.1f} s  ({', '.join(f'{t:.1f}' for t in times[1])})")
    print(f"--jobs 2: median {m2:.1f} s  ({', '.join(f'{t:.1f}' for t in times[2])})")
    print(f"ratio jobs2/jobs1: {m2 / m1:.2f}; reports identical apart from timings: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
