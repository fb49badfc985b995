"""The architecture step (readers/, inputs/, views/, typed hand-offs, one step plan) changed no finding: report.json
for the three bundled samples, every target, is the same as the code before it wrote on this machine — apart from
what differs between any two runs (times, worker figures, paths) and the fields the step added (`accelerated`,
`accelerator`, `declared_precisions` on every target).

The code before the step is taken from git history (BEFORE_STEP) and run in a subprocess beside this checkout;
both sides run on the same CPU, so a CPU-dependent choice (OpenVINO's bf16 on AMX, ORT's NCHWc block size) is made
alike on both. Floats are compared to 1e-5 relative: threaded reductions may round differently between runs."""
import json
import math
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The last commit before the architecture step (issue 28).
BEFORE_STEP = "b9bc917"
SAMPLES = ("vision-mini", "tts-mini", "transformer-mini")
NEW_TARGET_FIELDS = {"accelerated", "accelerator", "declared_precisions"}
# What differs between two runs of the same analysis (as tests/test_workers.py's _comparable): the phases' times
# and each node's measured time.
PER_RUN = {"timings", "seconds", "worker", "created_at", "run", "artifacts", "artifacts_dir", "traceback",
           "measured_us", "node_times"}
# Added since the step, on top of the findings it kept (issue 33): where ORT's assignment came from and how it was
# checked, the time evidence, and the drift attributed to the decisions along depth.
ADDED_SINCE = {"assignment_source", "assignment_sources_compared", "assignment_unconfirmed", "attribution"}
# Added by issue 50: each per-layer point's verification, and whether a reference output can tell targets apart.
ADDED_SINCE |= {"verified", "check", "unverified_reason", "unverified", "verification", "informative",
                "not_informative", "implausible"}
# Added by issue 51: one cause said once for several targets, and what the reference ran with (a .tflite's delegate).
ADDED_SINCE |= {"common_causes", "ran_with"}
# Corrected by issue 50: ONNX Runtime folded the fp16 emulation's casts away, so ort-coreml's numbers were fp32's;
# its outputs, drift, per-layer drift and checklist now carry the fp16 rounding they always claimed. Left out on both sides.
CORRECTED_SINCE = {"ort-coreml"}
# Added by issue 55: what running each target costs here, its accelerated share by MACs and time (and the
# checklist's threshold for it), task accuracy on a dataset.
ADDED_SINCE |= {"cost", "compute_share", "min_weighted_share", "accuracy", "dataset"}
# Added by issue 56: the captured model's weight records (capture.weights), and each captured aten node's
# non-tensor arguments beside its `target` (_without_aten_arguments).
ADDED_SINCE |= {"weights"}
# Moved since (issue 35): the Model Explorer export is made on demand rather than listed under `exports`, and the
# stage graphs are stored compressed (stages.json.gz) — where the findings live, not what they say.
MOVED_SINCE = {"exports"}
DEPRECATION_NOTE = "NNAPI is deprecated since Android 15"

_RUN = """
import json, sys
from xc_core.api import analyze
out = {}
for i, name in enumerate(sys.argv[3:]):
    out[name] = analyze(f"sample:{name}", sys.argv[2].split(","), out_dir=f"{sys.argv[1]}/{i}")
print(json.dumps(out))
"""


def _before_checkout(tmp_path) -> str:
    """xc_core as it was before the step, unpacked beside this checkout (or skip: a clone without that history)."""
    have = subprocess.run(["git", "-C", ROOT, "cat-file", "-e", f"{BEFORE_STEP}^{{commit}}"], capture_output=True)
    if have.returncode != 0:
        pytest.skip(f"this clone has no commit {BEFORE_STEP} (a shallow clone): nothing to compare with")
    folder = tmp_path / "before"
    folder.mkdir()
    archive = subprocess.run(["git", "-C", ROOT, "archive", BEFORE_STEP, "xc_core"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return str(folder)


# ONNX Runtime names the layout nodes it inserts (ReorderOutput_token_42) from a counter whose order varies from run
# to run on AVX-512 CPUs: the names lose the counter, and lists holding such names are compared as multisets.
_ORT_TOKEN = re.compile(r"_token_\d+")
# A bundled sample's source line (samples.py:63) moves whenever that file is edited (issue 51 added a lock): the
# file is compared, not the line.
_SAMPLE_LINE = re.compile(r"(samples\.py):\d+")
_ORT_UNNAMED = re.compile(r"^(\d+) (?:node\(s\) had no kernel event in the profile|compute node\(s\) not named by "
                          r"ORT's assignment API): ")


def _comparable(o):
    if isinstance(o, dict):
        out = {k: _comparable(v) for k, v in o.items()
               if k not in PER_RUN | ADDED_SINCE | MOVED_SINCE and not (k == "graph" and isinstance(v, str))}
        if isinstance(out.get("stage_graphs"), dict) and isinstance(out["stage_graphs"].get("file"), str):
            out["stage_graphs"]["file"] = out["stage_graphs"]["file"].removesuffix(".gz")
        if isinstance(out.get("evidence"), dict):
            out["evidence"].pop("time", None)      # the time evidence, added with the times (issue 33)
        return out
    if isinstance(o, list):
        # Added by issue 53: ort-nnapi's note that NNAPI is deprecated (a label, not a finding).
        items = [_comparable(v) for v in o if not (isinstance(v, str) and v.startswith(DEPRECATION_NOTE))]
        if "_token_" in json.dumps(o):
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return items
    if isinstance(o, str):
        # The checklist's evidence citing the drift attribution (issue 33) follows what it said before.
        o = o.split("; per-layer drift (")[0]
        # Question 2 says the weighted shares beside its count since issue 55.
        o = o.split("; on the accelerator: ")[0]
        # Question 2 says what it counts since issue 50 (one count per fact): compiled ops.
        o = o.replace(" compiled op(s) on the CPU", " op(s) on the CPU")
        # ORT's assignment comes from its API since issue 33: a node it does not name was one without a kernel
        # event in the profile before; the same node, said in the other source's words.
        o = o.replace(" (no kernel event in the profile)", "")
        o = _ORT_UNNAMED.sub(r"\1 node(s) unassigned: ", o)
        return _SAMPLE_LINE.sub(r"\1", _ORT_TOKEN.sub("", o))
    return o


def _without_corrected(report: dict) -> dict:
    """The report without the numbers issue 50 corrected on purpose (CORRECTED_SINCE's numbers and checklist)."""
    def corrected(t):
        info = {k: v for k, v in (t.get("info") or {}).items() if k != "intermediates_method"}
        return {**{k: v for k, v in t.items() if k not in ("drift", "layer_drift", "outputs")}, "info": info}
    targets = {tid: corrected(t) if tid in CORRECTED_SINCE else t for tid, t in report["targets"].items()}
    checklist = dict(report.get("checklist") or {})
    if isinstance(checklist.get("targets"), dict):
        checklist["targets"] = {tid: v for tid, v in checklist["targets"].items() if tid not in CORRECTED_SINCE}
    return {**report, "targets": targets, "checklist": checklist}


def _without_aten_arguments(report: dict) -> dict:
    """The report with its captured graph's aten nodes holding only their `target` attribute, as before issue 56."""
    capture = report.get("capture")
    if not isinstance(capture, dict) or not isinstance(capture.get("graph"), dict):
        return report
    nodes = [{**n, "attributes": {"target": n["attributes"]["target"]}}
             if n.get("domain") == "aten" and "target" in (n.get("attributes") or {}) else n
             for n in capture["graph"].get("nodes") or []]
    return {**report, "capture": {**capture, "graph": {**capture["graph"], "nodes": nodes}}}


def _differences(a, b, path="", out=None) -> list[str]:
    out = [] if out is None else out
    if len(out) >= 20:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'before' if k in a else 'after'}")
            else:
                _differences(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items before, {len(b)} after")
        for i, (x, y) in enumerate(zip(a, b)):
            _differences(x, y, f"{path}/{i}", out)
    elif isinstance(a, float) and isinstance(b, float):
        if not (math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))):
            out.append(f"{path}: {a!r} before, {b!r} after")
    elif a != b:
        out.append(f"{path}: {str(a)[:120]!r} before, {str(b)[:120]!r} after")
    return out


@pytest.mark.slow
def test_the_three_samples_report_the_same_before_and_after_the_step(tmp_path, sample_report):
    before_root = _before_checkout(tmp_path)
    env = {**os.environ, "PYTHONPATH": before_root}
    from conftest import ALL_TARGETS        # what the session's sample reports were made with
    run = subprocess.run([sys.executable, "-c", _RUN, str(tmp_path / "runs"), ",".join(ALL_TARGETS), *SAMPLES],
                         cwd=before_root, env=env,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    before = json.loads(run.stdout.strip().splitlines()[-1])
    for name in SAMPLES:
        after, _ = sample_report(name)
        for tid, t in after["targets"].items():
            assert NEW_TARGET_FIELDS <= set(t), tid
        stripped = {**after, "targets": {tid: {k: v for k, v in t.items() if k not in NEW_TARGET_FIELDS}
                                         for tid, t in after["targets"].items()}}
        assert set(before[name]["targets"]) == set(after["targets"]), name
        problems = _differences(_comparable(_without_corrected(before[name])),
                                _comparable(_without_corrected(_without_aten_arguments(stripped))))
        assert not problems, f"{name}: " + "; ".join(problems)
