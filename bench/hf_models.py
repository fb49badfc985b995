"""Today's models through every target: GPT-2, ViT and wav2vec2 from `transformers` configs (tests/hf_models.py),
each as a .pt2 and as ONNX from the dynamo exporter (with its external data), analysed as the CLI does.

    python bench/hf_models.py [--models gpt2,vit,wav2vec2] [--formats pt2,onnx] [--targets all] [--out DIR]

Prints, per model, format and target: the status, the worst drift against the reference, and for a failure its
one-line error with whose limitation it is and what to do. Every cell must be ok or such an error (exit 1 when a
failure has no advice, or when the analysis itself was refused).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,vit,wav2vec2")
    ap.add_argument("--formats", default="pt2,onnx")
    ap.add_argument("--targets", default="all")
    ap.add_argument("--out", default=None, help="keep the files and runs here (default: a temporary folder)")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="hf-bench-")
    models = args.models.split(",")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "hf_models.py"), out, *models], check=True,
                   capture_output=True)
    from xc_core.analysis.advice import advice_line
    bad = 0
    for name in models:
        for fmt in args.formats.split(","):
            path = os.path.join(out, f"{name}.{fmt}")
            run = os.path.join(out, f"run-{name}-{fmt}")
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "xc_core", "analyze", path, "--targets", args.targets,
                                   "--out", run, "--quiet", "--no-store"], cwd=ROOT, capture_output=True, text=True)
            print(f"\n{name}.{fmt}: {time.monotonic() - t0:.0f} s")
            if proc.returncode != 0:
                print(f"  refused (exit {proc.returncode}): {proc.stderr.strip()}")
                bad += 1
                continue
            report = json.load(open(os.path.join(run, "report.json")))
            for tid, t in report["targets"].items():
                worst = ((t.get("drift") or {}).get("worst") or {})
                if t["status"] == "ok":
                    print(f"  {tid:22} ok      worst rel L2 {worst.get('rel_l2', float('nan')):.2e} "
                          f"({worst.get('output', '—')})")
                    continue
                advice = advice_line(t.get("advice"))
                print(f"  {tid:22} {t['status']:7} {t['error']}")
                if advice:
                    print(f"  {'':22}         ↳ {advice}")
                elif t["status"] == "error":
                    bad += 1
    print(f"\nfiles and runs in {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
