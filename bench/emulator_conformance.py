"""xc's two emulators checked against suites xc did not write.

    python bench/emulator_conformance.py [--part mil,fp16] [--mil-fp16 none|sample|all] [--json FILE]
                                         [--before FILE] [--write-slice]

**MIL interpreter** (`xc_core/emulate/mil_interpreter.py`, the numerics of coreml-ane / coreml-cpu /
executorch-coreml) against coremltools' own MIL op tests, the ones shipped in the coremltools wheel
(`coremltools/converters/mil/mil/ops/tests/iOS14 … iOS18`, `coreml_dialect`): each test builds a MIL program with
coremltools' Builder and gives inputs and expected outputs (hand-written, or from numpy / PyTorch / the op's own
value inference). Those tests end in `run_compare_builder`, which converts the program and compares Core ML's
prediction with the expected outputs on macOS only. Here the suite runs under pytest in a child process with two of
coremltools' test helpers replaced (`ct_convert`, `compare_backend`): the program is run by xc's interpreter instead
of Core ML and compared with the test's expected outputs at the test's own tolerance.

- `raw` (always): the program as the Builder made it, every test parametrized for an fp32 ML program (iOS15 …
  iOS18 opsets). A program that itself carries fp16 tensors (fp16 inputs or weights) is compared at the tolerance
  coremltools' `compare_backend` applies to fp16 execution (atol × 100 but ≥ 0.5, rtol × 100 but ≥ 0.05), the
  fp32 ones at the test's own atol / rtol.
- `converted` (`--mil-fp16 sample`: the first fp16 case of every test function; `all`: every one, about an hour):
  the program after `ct.convert(..., compute_precision=FLOAT16)` and its pass pipeline — what xc interprets for
  coreml-ane — at coremltools' fp16 tolerance.

A verdict per case: `match`; `refused` (the interpreter raised its own "cannot emulate op X" — an op it does not
implement or an input it will not guess at); `crashed` (any other exception, also one the interpreter wrapped: a bug
in an op it claims); `mismatched` (ran, and a value or shape is outside the tolerance: a silent wrong number, the
one verdict that must stay 0). Per op type of the interpreter's dispatch table: the cases whose program holds it.
Ops the suite never exercises with a backend comparison (`ceil`, the `logical_*` family) are checked against
PyTorch eager instead: a small module per op, converted by coremltools, the interpreter's output against torch's.

**fp16 ONNX emulation** (`xc_core/emulate/fp16_onnx.py`, the numerics of ort-nnapi / ort-coreml with fp16) against
ONNX's backend node tests (`onnx.backend.test.case.node.collect_testcases()`, in the onnx wheel: one small model
per case with inputs and expected outputs). Each case's nodes are named (`n<i>_<op>`, as xc's targets name them) and
its model is run by ONNX Runtime's CPU EP in fp32 (a case ORT refuses is counted, not held against the emulation);
then through `emulate_fp16` twice:

- fp16 off (no node accelerated): must give ORT's fp32 outputs bit for bit (`identical`), in the declared dtypes.
- fp16 on (every node accelerated): the rung that ran (`converted`, `converted-partly`, `rounded`, `failed` —
  failed is a clean refusal: the target says xc's emulation failed) and a verdict: `match` (every output within
  the fp16 tolerance of the expected output: |got − expected| ≤ FP16_ATOL·max(1, max|expected|) +
  FP16_RTOL·|expected|, i.e. a few units in the last place of fp16, whose spacing is 2⁻¹⁰ relative); `fp16 effect`
  (outside it, but as far from the expected output as the same model in fp32 on fp16-rounded inputs with its outputs
  rounded to fp16 is — fp16's own error: a comparison or rounding that flips, a cancellation, a value past 65,504);
  `fp16 not applied` (a float output that is not an fp16 value: the graph ran in fp32 although it claims fp16);
  `mismatched` (none of these: a wrong number); `crashed` (an exception other than the emulation's own refusal).

`--json FILE` keeps every case; `--before FILE` prints each total beside the same total in an earlier `--json`
(the figures before a fix). `--write-slice` writes the fast slice `tests/test_emulator_conformance.py` runs: for
every op of the interpreter, one coremltools case that matched (`tests/emulator_conformance_mil_slice.json`).
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]

import numpy as np  # noqa: E402

SLICE_PATH = os.path.join(ROOT, "tests", "emulator_conformance_mil_slice.json")

# ====================================================================================================== MIL

SUITE_DIRS = ("iOS14", "iOS15", "iOS16", "iOS17", "iOS18", "coreml_dialect")
FP16_TOLERANCE_NOTE = "coremltools' fp16 tolerance (atol x100 >= 0.5, rtol x100 >= 0.05)"


def coremltools_op_tests_dir() -> str:
    """The MIL op tests inside the installed coremltools package (found without importing coremltools)."""
    spec = importlib.util.find_spec("coremltools")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("coremltools is not installed")
    return os.path.join(spec.submodule_search_locations[0], "converters", "mil", "mil", "ops", "tests")


def _op_types(block, found: set) -> set:
    for op in block.operations:
        found.add(op.op_type)
        for inner in op.blocks:
            _op_types(inner, found)
    return found


def _carries_fp16(fn) -> bool:
    from coremltools.converters.mil.mil import types
    vars_ = list(fn.inputs.values()) + [v for op in fn.operations for v in op.outputs]
    return any(getattr(v, "dtype", None) == types.fp16 for v in vars_)


class _Interpreted:
    """What coremltools' `ct_convert` returns to `run_compare_builder`, standing in for an MLModel: the program, and
    the state a stateful program keeps between predictions."""

    def __init__(self, prog, compute_unit):
        self._mil_program = prog
        self.compute_unit = compute_unit
        self.states: dict = {}

    def _is_stateful(self) -> bool:
        from coremltools.converters.mil.mil import types
        return any(types.is_state(v.sym_type) for v in self._mil_program.functions["main"].inputs.values())

    def make_state(self):
        return self


def classify_mil_case(prog, input_values: dict, expected: dict, atol: float, rtol: float, fp16_backend: bool,
                      states: dict | None = None) -> dict:
    """Run `prog` with xc's interpreter and judge it against `expected` (output name → value, in program order)."""
    from coremltools.converters.mil.mil import types
    from xc_core.emulate.mil_interpreter import EmulationError, run_program
    fn = prog.functions["main"]
    fp16 = fp16_backend or _carries_fp16(fn)
    if fp16:
        atol, rtol = max(atol * 100.0, 5e-1), max(rtol * 100.0, 5e-2)
    rec = {"ops": sorted(_op_types(fn, set()) - {"const"}), "tolerance": "fp16" if fp16 else "fp32",
           "atol": atol, "rtol": rtol}
    feeds = dict(input_values or {})
    state_names = []
    for name, var in fn.inputs.items():
        if types.is_state(var.sym_type):
            state_names.append(name)
            if name not in feeds:   # Core ML's make_state() starts from zeros
                wrapped = var.sym_type.wrapped_type()
                zeros = np.zeros([int(d) for d in wrapped.get_shape()], types.nptype_from_builtin(
                    wrapped.get_primitive()))
                feeds[name] = (states or {}).get(name, zeros)
    try:
        outputs, recorded = run_program(prog, feeds)
    except EmulationError as exc:
        cause = exc.__cause__
        text = str(exc)
        op = text.split("cannot emulate op ", 1)[1].split(" ", 1)[0] if "cannot emulate op " in text else None
        reason = text.split("): ", 1)[1] if "): " in text else text
        if cause is not None and not isinstance(cause, EmulationError):
            rec.update(verdict="crashed", op=op, reason=reason)
        else:
            rec.update(verdict="refused", op=op, reason=reason)
        return rec
    except Exception as exc:  # noqa: BLE001 — anything but the interpreter's own refusal is a crash
        rec.update(verdict="crashed", op=None, reason=f"{type(exc).__name__}: {exc}"[:300])
        return rec
    if states is not None:   # the value each state holds after this prediction: the last update written to it
        for op in fn.operations:
            if op.op_type == "coreml_update_state":
                states[op.inputs["state"].name] = recorded.get(op.outputs[0].name)
    problems, worst = [], 0.0
    got_values = list(outputs.values())
    for i, (name, want) in enumerate(expected.items()):
        got = outputs.get(name, got_values[i] if i < len(got_values) else None)
        want = np.asarray(want)
        if got is None:
            problems.append(f"{name}: no output")
            continue
        got = np.asarray(got)
        if got.shape != want.shape:
            problems.append(f"{name}: shape {got.shape}, expected {want.shape}")
            continue
        if got.dtype.kind in "fc" or want.dtype.kind in "fc":
            g, w = got.astype(np.float64), want.astype(np.float64)
            if not np.allclose(g, w, atol=atol, rtol=rtol, equal_nan=True):
                with np.errstate(invalid="ignore"):
                    err = float(np.nanmax(np.abs(g - w))) if g.size else 0.0
                worst = max(worst, err)
                problems.append(f"{name}: max abs error {err:.3g}")
        elif not np.array_equal(got, want):
            problems.append(f"{name}: {int(np.sum(got != want))} of {want.size} values differ")
    rec.update(verdict="mismatched" if problems else "match", reason="; ".join(problems) or None,
               max_abs_err=worst if problems else None)
    return rec


class MilSuitePlugin:
    """A pytest plugin for coremltools' MIL op tests: conversion and Core ML prediction replaced by xc's
    interpreter; one JSON line per compared program in `out_path`."""

    def __init__(self, out_path: str, mode: str = "raw", sample: bool = False):
        self.out_path = out_path
        self.mode = mode          # raw: the Builder's program, fp32 cases | converted: after ct.convert, fp16 cases
        self.sample = sample      # the first case of every test function only
        self.current = None

    def pytest_configure(self, config):
        import coremltools.converters.mil.mil.ops.tests.testing_utils as helpers
        real_convert = helpers.ct_convert

        def convert(program, **kwargs):
            if self.mode == "raw":
                return _Interpreted(program, kwargs.get("compute_units"))
            kwargs["skip_model_load"] = True   # nothing to load on Linux; the program is what xc reads
            return _Interpreted(real_convert(program, **kwargs)._mil_program, kwargs.get("compute_units"))

        def compare(mlmodel, input_key_values, expected_outputs, dtype="fp32", atol=1e-4, rtol=1e-5,
                    also_compare_shapes=True, state=None, **_):
            if not expected_outputs:
                return None
            t0 = time.monotonic()
            rec = classify_mil_case(mlmodel._mil_program, input_key_values, expected_outputs, atol, rtol,
                                    dtype == "fp16", mlmodel.states if state is not None else None)
            rec.update(test=self.current, mode=self.mode, seconds=round(time.monotonic() - t0, 4),
                       opset=str(mlmodel._mil_program.functions["main"].opset_version))
            with open(self.out_path, "a") as f:
                f.write(json.dumps(rec, default=str) + "\n")
            return None

        helpers.ct_convert = convert
        helpers.compare_backend = compare

    def pytest_collection_modifyitems(self, session, config, items):
        wanted = "fp32" if self.mode == "raw" else "fp16"
        kept, seen = [], set()
        for item in items:
            backend = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
            precision = getattr(backend, "precision", None)
            if precision is not None and (precision != wanted or getattr(backend, "backend", "") != "mlprogram"):
                continue
            function = item.nodeid.split("[", 1)[0]
            if self.sample and function in seen:
                continue
            seen.add(function)
            kept.append(item)
        deselected = [i for i in items if i not in set(kept)]
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept

    def pytest_runtest_setup(self, item):
        self.current = item.nodeid.split("/ops/tests/", 1)[-1]


def _plugin_main(argv: list[str]) -> int:
    """Child-process entry: `python bench/emulator_conformance.py --mil-child OUT MODE SAMPLE [pytest args…]`."""
    import pytest
    out, mode, sample, *args = argv
    return pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header", "-o", "addopts=",
                        *args], plugins=[MilSuitePlugin(out, mode, sample == "1")])


def run_mil_suite(mode: str = "raw", sample: bool = False, node_ids: list[str] | None = None,
                  timeout: float | None = None) -> list[dict]:
    """coremltools' MIL op tests through xc's interpreter in a child pytest; one record per compared program."""
    tests = coremltools_op_tests_dir()
    scratch = tempfile.mkdtemp(prefix="emulator-conformance-")
    try:
        out = os.path.join(scratch, "records.jsonl")
        targets = [os.path.join(tests, n) for n in node_ids] if node_ids else [os.path.join(tests, d)
                                                                             for d in SUITE_DIRS]
        env = dict(os.environ, PYMIL_TEST_TARGETS="mlprogram", INCLUDE_MIL_FP32_UNIT_TESTS="1", TMPDIR=scratch,
                   PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--mil-child", out, mode,
                               "1" if sample else "0", "--rootdir", tests, *targets],
                              cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout)
        if not os.path.exists(out):
            raise RuntimeError(f"coremltools' op tests produced no comparison (exit {proc.returncode}): "
                               + (proc.stdout + proc.stderr)[-2000:])
        with open(out) as f:
            records = [json.loads(line) for line in f]
        for r in records:
            r["suite"] = "coremltools"
        return records
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --- ops coremltools' suite never compares on a backend: PyTorch eager as the reference ----------------------

def _torch_peer_cases():
    import torch

    class Ceil(torch.nn.Module):
        def forward(self, x):
            return torch.ceil(x)

    class Logical(torch.nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.kind = kind

        def forward(self, x, y):
            a, b = x > 0, y > 0
            out = {"and": lambda: torch.logical_and(a, b), "or": lambda: torch.logical_or(a, b),
                   "xor": lambda: torch.logical_xor(a, b), "not": lambda: torch.logical_not(a)}[self.kind]()
            return out.to(torch.float32)  # bool outputs are not a Core ML output type

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 7, generator=g) * 3, torch.randn(3, 7, generator=g)
    return {"ceil": (Ceil(), (x,)),
            "logical_and": (Logical("and"), (x, y)), "logical_or": (Logical("or"), (x, y)),
            "logical_xor": (Logical("xor"), (x, y)), "logical_not": (Logical("not"), (x, y))}


def run_torch_peers(ops: list[str] | None = None) -> list[dict]:
    """Each op of `_torch_peer_cases` in a tiny torch module, converted by coremltools (fp32 ML program), run by
    the interpreter and compared with torch eager (atol 1e-6, rtol 1e-5)."""
    import coremltools as ct
    import torch
    records = []
    for op, (module, args) in _torch_peer_cases().items():
        if ops is not None and op not in ops:
            continue
        rec = {"suite": "torch", "mode": "raw", "test": f"torch peer: {op}", "target_op": op}
        try:
            ep = torch.export.export(module.eval(), args).run_decompositions({})
            prog = ct.convert(ep, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                              minimum_deployment_target=ct.target.iOS17, skip_model_load=True)._mil_program
        except Exception as exc:  # noqa: BLE001 — a conversion failure is reported, not a verdict on xc
            rec.update(verdict="no case", reason=f"coremltools could not convert: {exc}"[:200], ops=[])
            records.append(rec)
            continue
        with torch.no_grad():
            want = module(*args).numpy()
        fn = prog.functions["main"]
        feeds = {name: a.numpy() for name, a in zip(fn.inputs, args)}
        rec.update(classify_mil_case(prog, feeds, {fn.outputs[0].name: want}, 1e-6, 1e-5, False))
        rec["opset"] = str(fn.opset_version)
        if op not in rec["ops"]:
            rec.update(verdict="no case", reason=f"coremltools lowered it without a {op} op")
        records.append(rec)
    return records


def mil_tables(records: list[dict]) -> tuple[dict, list[list]]:
    """Totals and the per-op rows: op, cases, match, refused (this op), refused (another op), mismatched,
    crashed, source."""
    from xc_core.emulate.mil_interpreter import OPS
    totals = collections.Counter(r["verdict"] for r in records)
    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in records:
        if r["verdict"] == "no case":
            continue
        for op in r["ops"]:
            c = per_op[op]
            c["cases"] += 1
            c[r["suite"]] += 1
            if r["verdict"] == "refused":
                c["refused" if r.get("op") == op else "blocked"] += 1
            else:
                c[r["verdict"]] += 1
    rows = []
    for op in sorted(set(OPS) | set(per_op)):
        c = per_op.get(op, collections.Counter())
        where = "interpreter" if op in OPS else "not implemented"
        if op == "const":   # every program's parameters; checked by every case
            continue
        rows.append([op, where, c["cases"], c["match"], c["refused"], c["blocked"], c["mismatched"], c["crashed"],
                     "coremltools" if c["coremltools"] else ("torch" if c["torch"] else "-")])
    return dict(totals), rows


def print_mil(records: list[dict], title: str, every_op: bool = True) -> None:
    totals, rows = mil_tables(records)
    print(f"\n{title}: {len(records)} compared programs — " + ", ".join(
        f"{k} {totals.get(k, 0)}" for k in ("match", "refused", "mismatched", "crashed", "no case")))
    fp16 = [r for r in records if r.get("tolerance") == "fp16"]
    if fp16:
        print(f"  {len(fp16)} of them carry fp16 tensors and are judged at {FP16_TOLERANCE_NOTE}")
    print(f"  {'op':34} {'':15} {'cases':>6} {'match':>6} {'refused':>8} {'blocked':>8} {'mismatch':>9} "
          f"{'crashed':>8}  reference")
    for op, where, cases, match, refused, blocked, mism, crashed, source in rows:
        if not cases and not every_op:
            continue
        flag = ("  <- wrong or crashed" if mism or crashed else
                "  <- no case matched" if where == "interpreter" and not match else "")
        print(f"  {op:34} {where:15} {cases:6d} {match:6d} {refused:8d} {blocked:8d} {mism:9d} {crashed:8d}  "
              f"{source}{flag}")
    reasons = collections.Counter((r.get("op"), r["reason"]) for r in records if r["verdict"] == "refused")
    if reasons:
        print("  refused, by op and reason:")
        for (op, reason), n in sorted(reasons.items(), key=lambda kv: (-kv[1], str(kv[0]))):
            print(f"    {n:5d}  {op}: {reason[:110]}")
    for verdict in ("mismatched", "crashed"):
        bad = collections.Counter((r["test"].split("[", 1)[0], r["reason"][:160]) for r in records
                                  if r["verdict"] == verdict)
        if bad:
            print(f"  {verdict}, by test function:")
            for (test, reason), n in sorted(bad.items()):
                print(f"    {n:5d}  {test}\n           {reason}")


# ================================================================================================= fp16 ONNX

FP16_RTOL = 2.0 ** -8    # 4 units in the last place of fp16 (spacing 2^-10 relative)
FP16_ATOL = 2.0 ** -8    # × max(1, max|expected|): an output's near-zero values carry its scale's absolute error


def _within_fp16(got: np.ndarray, want: np.ndarray) -> bool:
    g, w = got.astype(np.float64), want.astype(np.float64)
    # fp16 kernels mask with fp16's extreme finite value where fp32 ones use infinity
    g = np.where(np.isinf(w) & (np.abs(g) == 65504.0) & (np.sign(g) == np.sign(w)), w, g)
    finite = np.isfinite(w)
    scale = max(1.0, float(np.max(np.abs(w[finite])))) if finite.any() else 1.0
    return bool(np.allclose(g, w, rtol=FP16_RTOL, atol=FP16_ATOL * scale, equal_nan=True))


def _is_fp16_valued(a: np.ndarray) -> bool:
    if a.dtype != np.float32:   # the emulation converts fp32 only; doubles stay doubles
        return True
    finite = a[np.isfinite(a)]
    return bool(np.array_equal(finite.astype(np.float16).astype(a.dtype), finite))


def _named(model):
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, n in enumerate(m.graph.node):
        if not n.name:
            n.name = f"n{i}_{n.op_type}"
    return m


def _round_to_fp16(a):
    return a.astype(np.float16).astype(a.dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a


def classify_fp16_case(case, workdir: str) -> dict:
    """One ONNX node test through ORT fp32 and `emulate_fp16` with nothing and with everything accelerated."""
    import onnx
    from xc_core.emulate.fp16_onnx import EmulationFailed, emulate_fp16
    from xc_core.targets.ort_common import make_session, run_session
    model = _named(case.model)
    rec = {"suite": "onnx", "test": case.name, "ops": sorted({n.op_type for n in model.graph.node})}
    inputs, expected = case.data_sets[0]
    if any(not isinstance(v, np.ndarray) for v in list(inputs) + list(expected)):
        rec["ort"] = "not tensors"   # sequences, maps, optionals: outside what xc's ORT targets feed
        return rec
    initialized = {i.name for i in model.graph.initializer}
    feeds = dict(zip([i.name for i in model.graph.input if i.name not in initialized], inputs))
    want = dict(zip([o.name for o in model.graph.output], expected))
    path = os.path.join(workdir, "model.onnx")
    onnx.save(model, path)

    def run(p, values=feeds):
        return run_session(make_session(p, "ORT_DISABLE_ALL"), values)

    try:
        fp32 = run(path)
    except Exception as exc:  # noqa: BLE001 — ORT's refusal of the case, not the emulation's
        rec.update(ort="refuses", reason=str(exc).splitlines()[0][:200])
        return rec
    rec["ort"] = "runs"
    rec["ort_vs_expected"] = all(
        np.allclose(fp32[n].astype(np.float64), np.asarray(w).astype(np.float64), rtol=case.rtol, atol=case.atol,
                    equal_nan=True) if np.asarray(w).dtype.kind in "fc" else np.array_equal(fp32[n], w)
        for n, w in want.items() if n in fp32 and fp32[n].shape == np.asarray(w).shape)

    # fp16 off: the emulation's machinery with nothing to convert must hand back ORT's fp32 outputs unchanged
    try:
        off = emulate_fp16(model, set(), workdir, run)
        diffs = [n for n, v in fp32.items()
                 if off.outputs.get(n) is None or off.outputs[n].dtype != v.dtype
                 or not np.array_equal(off.outputs[n], v, equal_nan=v.dtype.kind in "fc")]
        rec["off"] = {"method": off.method, "verdict": "differs" if diffs else "identical",
                      "reason": "; ".join(f"{n}: {off.outputs[n].dtype if n in off.outputs else 'missing'} "
                                          f"where ORT gives {fp32[n].dtype}" for n in diffs) or None}
    except EmulationFailed as exc:
        rec["off"] = {"method": "failed", "verdict": "failed", "reason": str(exc)[:300]}
    except Exception as exc:  # noqa: BLE001
        rec["off"] = {"method": "crashed", "verdict": "crashed", "reason": f"{type(exc).__name__}: {exc}"[:300]}

    # fp16 on: every node accelerated
    try:
        on = emulate_fp16(model, {n.name for n in model.graph.node}, workdir, run)
    except EmulationFailed as exc:
        rec["on"] = {"method": "failed", "verdict": "failed", "reason": str(exc)[:300]}
        return rec
    except Exception as exc:  # noqa: BLE001
        rec["on"] = {"method": "crashed", "verdict": "crashed", "reason": f"{type(exc).__name__}: {exc}"[:300]}
        return rec
    try:   # fp16's own error: the fp32 model on fp16-rounded inputs, outputs rounded to fp16
        rounded = {n: _round_to_fp16(v) for n, v in run(path, {k: _round_to_fp16(v) for k, v in feeds.items()})
                   .items()}
    except Exception:  # noqa: BLE001 — e.g. a rounded input that leaves the op's domain
        rounded = {}
    verdicts, kept = [], []
    producers = {t: n.op_type for n in model.graph.node for t in n.output}
    for name, w in want.items():
        w, got = np.asarray(w), on.outputs.get(name)
        if got is None or got.shape != w.shape or got.dtype != fp32[name].dtype:
            verdicts.append(("mismatched", f"{name}: " + ("missing" if got is None else
                             f"{got.dtype}{list(got.shape)} where ORT gives {fp32[name].dtype}"
                             f"{list(fp32[name].shape)}")))
            continue
        if producers.get(name) in on.kept_fp32_ops:   # kept in fp32 by the rung, and named by it
            kept.append(name)
        elif not _is_fp16_valued(got):
            verdicts.append(("fp16 not applied", f"{name}: values that are not fp16 values"))
            continue
        same = _within_fp16 if w.dtype.kind in "fc" else (lambda a, b: np.array_equal(a, b))
        if same(got, w):
            verdicts.append(("match", None))
        elif name in rounded and rounded[name].shape == w.shape and (
                (w.dtype.kind in "fc" and np.nanmax(np.abs(got.astype(np.float64) - w)) <= max(
                    np.nanmax(np.abs(rounded[name].astype(np.float64) - w)), 0) * 1.01 + 1e-12)
                or same(got, rounded[name])):
            verdicts.append(("fp16 effect", f"{name}: as far from expected as fp16-rounded inputs take fp32"))
        else:
            err = (float(np.nanmax(np.abs(got.astype(np.float64) - w))) if w.dtype.kind in "fc" and w.size
                   else int(np.sum(got != w)))
            verdicts.append(("mismatched", f"{name}: max abs error {err:.3g}" if isinstance(err, float)
                             else f"{name}: {err} of {w.size} values differ"))
    order = ("crashed", "mismatched", "fp16 not applied", "fp16 effect", "match")
    worst = min(verdicts, key=lambda v: order.index(v[0])) if verdicts else ("match", None)
    rec["on"] = {"method": on.method, "verdict": worst[0], "reason": worst[1], "kept_fp32_ops": on.kept_fp32_ops,
                 "outputs_kept_fp32": kept}
    return rec


def onnx_node_cases(select: set[str] | None = None) -> list:
    import warnings
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in collect_testcases() if c.kind == "node" and c.data_sets]
    return [c for c in cases if select is None or c.name in select]


def one_case_per_op(cases: list) -> list:
    """The first case of every op type (single-node models first), for the fast slice."""
    chosen: dict[str, object] = {}
    for c in sorted(cases, key=lambda c: len(c.model.graph.node)):
        for n in c.model.graph.node:
            chosen.setdefault(n.op_type, c)
    return list({id(c): c for c in chosen.values()}.values())


def run_fp16_suite(cases: list) -> list[dict]:
    import warnings
    records = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in cases:
            scratch = tempfile.mkdtemp(prefix="emulator-conformance-")
            try:
                records.append(classify_fp16_case(case, scratch))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    return records


def fp16_totals(records: list[dict]) -> dict:
    t = collections.Counter()
    for r in records:
        t[f"ort {r['ort']}"] += 1
        if r["ort"] != "runs":
            continue
        t[f"off {r['off']['verdict']}"] += 1
        t[f"on {r['on']['verdict']}"] += 1
        t[f"rung {r['on']['method']}"] += 1
    return dict(t)


def print_fp16(records: list[dict]) -> None:
    t = fp16_totals(records)
    ran = t.get("ort runs", 0)
    print(f"\nfp16 ONNX emulation vs ONNX's backend node tests: {len(records)} cases; ONNX Runtime runs {ran}, "
          f"refuses {t.get('ort refuses', 0)}, {t.get('ort not tensors', 0)} take sequences/maps/optionals")
    print("  fp16 off (nothing accelerated): " + ", ".join(
        f"{k} {t.get('off ' + k, 0)}" for k in ("identical", "differs", "failed", "crashed")))
    print("  fp16 on  (everything accelerated): " + ", ".join(
        f"{k} {t.get('on ' + k, 0)}" for k in ("match", "fp16 effect", "fp16 not applied", "mismatched", "failed",
                                               "crashed")))
    print("    rung: " + ", ".join(f"{k} {t.get('rung ' + k, 0)}" for k in ("converted", "converted-partly",
                                                                           "rounded", "failed", "crashed")))
    print(f"    tolerance: |got - expected| <= {FP16_ATOL:.3g}·max(1, max|expected|) + {FP16_RTOL:.3g}·|expected|")
    per_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in records:
        if r["ort"] != "runs":
            continue
        for op in r["ops"]:
            c = per_op[op]
            c["cases"] += 1
            c["off " + r["off"]["verdict"]] += 1
            c["on " + r["on"]["verdict"]] += 1
            c["rung " + r["on"]["method"]] += 1
    print(f"  {'op':28} {'cases':>5} {'off=ORT':>7} {'match':>6} {'fp16eff':>7} {'notfp16':>7} {'mism':>5} "
          f"{'failed':>6} {'crash':>5}  rungs (converted/partly/rounded)")
    for op in sorted(per_op):
        c = per_op[op]
        bad = c["off differs"] + c["off crashed"] + c["on mismatched"] + c["on crashed"] + c["on fp16 not applied"]
        print(f"  {op:28} {c['cases']:5d} {c['off identical']:7d} {c['on match']:6d} {c['on fp16 effect']:7d} "
              f"{c['on fp16 not applied']:7d} {c['on mismatched']:5d} {c['on failed']:6d} {c['on crashed']:5d}  "
              f"{c['rung converted']}/{c['rung converted-partly']}/{c['rung rounded']}{'  <-' if bad else ''}")
    for label, pick in (("off differs", lambda r: r["off"]["verdict"] in ("differs", "crashed")),
                        ("on mismatched / crashed / not fp16", lambda r: r["on"]["verdict"] in (
                            "mismatched", "crashed", "fp16 not applied"))):
        bad = [r for r in records if r["ort"] == "runs" and pick(r)]
        if bad:
            print(f"  {label}: {len(bad)}")
            for r in bad[:25]:
                part = r["off"] if label.startswith("off") else r["on"]
                print(f"    {r['test']:48} {part['method']:16} {(part['reason'] or '')[:90]}")
            if len(bad) > 25:
                print(f"    … and {len(bad) - 25} more")


# ===================================================================================================== main

def summary(records: list[dict]) -> dict:
    mil = [r for r in records if r["suite"] in ("coremltools", "torch")]
    out = {}
    for mode in ("raw", "converted"):
        part = [r for r in mil if r.get("mode") == mode]
        if part:
            out.update({f"mil {mode} {k}": v for k, v in collections.Counter(r["verdict"] for r in part).items()})
    out.update({f"fp16 {k}": v for k, v in fp16_totals([r for r in records if r["suite"] == "onnx"]).items()})
    return out


def write_slice(records: list[dict]) -> None:
    """For every op of the interpreter, one raw coremltools case that matched: fewest ops first."""
    from xc_core.emulate.mil_interpreter import OPS
    matched = sorted((r for r in records if r["suite"] == "coremltools" and r.get("mode") == "raw"
                      and r["verdict"] == "match"), key=lambda r: (len(r["ops"]), r["test"]))
    chosen: dict[str, str] = {}
    for r in matched:
        for op in r["ops"]:
            if op in OPS and op not in chosen:
                chosen[op] = r["test"]
    with open(SLICE_PATH, "w") as f:
        json.dump({"about": "one coremltools MIL op test per op of xc's MIL interpreter that matched; written by "
                            "bench/emulator_conformance.py --write-slice",
                   "cases": dict(sorted(chosen.items()))}, f, indent=1)
        f.write("\n")
    print(f"\nwrote {SLICE_PATH}: {len(chosen)} ops, {len(set(chosen.values()))} tests")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--mil-child":
        return _plugin_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="mil,fp16", help="mil, fp16 or both (comma-separated)")
    ap.add_argument("--mil-fp16", choices=("none", "sample", "all"), default="sample",
                    help="also interpret coremltools' fp16 conversions: none, the first case per test function "
                         "(default), or all of them (about an hour)")
    ap.add_argument("--json", help="write every case and the totals here")
    ap.add_argument("--before", help="an earlier --json: print its totals beside these")
    ap.add_argument("--write-slice", action="store_true",
                    help="write the fast MIL slice for tests/test_emulator_conformance.py")
    args = ap.parse_args()
    parts = set(args.part.split(","))
    records: list[dict] = []
    if "mil" in parts:
        t0 = time.monotonic()
        raw = run_mil_suite("raw") + run_torch_peers()
        records += raw
        print_mil(raw, f"MIL interpreter vs coremltools' MIL op tests, fp32 programs as built "
                       f"({time.monotonic() - t0:.0f} s)")
        if args.mil_fp16 != "none":
            t0 = time.monotonic()
            conv = run_mil_suite("converted", sample=args.mil_fp16 == "sample")
            records += conv
            print_mil(conv, f"MIL interpreter vs coremltools' MIL op tests, fp16 conversions "
                            f"({'first case per test function' if args.mil_fp16 == 'sample' else 'all'}; "
                            f"{time.monotonic() - t0:.0f} s)", every_op=False)
        if args.write_slice:
            write_slice(raw)
    if "fp16" in parts:
        t0 = time.monotonic()
        fp16 = run_fp16_suite(onnx_node_cases())
        records += fp16
        print_fp16(fp16)
        print(f"  ({time.monotonic() - t0:.0f} s)")
    totals = summary(records)
    if args.before:
        with open(args.before) as f:
            before = json.load(f)["totals"]
        print("\nbefore → after:")
        for key in sorted(set(before) | set(totals)):
            if key.split(" ")[0] in parts:
                b, a = before.get(key, 0), totals.get(key, 0)
                print(f"  {key:40} {b:6d} → {a:6d}{'' if a == b else '  *'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"totals": totals, "records": records}, f, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
