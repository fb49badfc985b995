"""The fast slice of bench/emulator_conformance.py: xc's two emulators against suites xc did not write.

- MIL interpreter: for every op of its dispatch table, one of coremltools' own MIL op tests (the case the bench
  picked: tests/emulator_conformance_mil_slice.json), its program run by the interpreter instead of Core ML and
  compared with the test's expected outputs; and the ops that suite never compares (ceil, logical_*) against
  PyTorch eager.
- fp16 ONNX emulation: one of ONNX's backend node tests per op type, with fp16 off (ONNX Runtime's fp32 numbers,
  bit for bit) and on (within fp16's tolerance of the expected output, or as far as fp16 itself takes it — never a
  wrong number, never fp32 passed off as fp16).
"""
import collections
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import emulator_conformance as bench  # noqa: E402


def _slice() -> dict[str, str]:
    with open(bench.SLICE_PATH) as f:
        return json.load(f)["cases"]


def test_every_interpreter_op_has_a_case_from_a_suite_xc_did_not_write():
    from xc_core.emulate.mil_interpreter import OPS
    uncovered = set(OPS) - {"const"} - set(_slice()) - set(bench._torch_peer_cases())
    assert not uncovered, f"no coremltools test or torch peer exercises {sorted(uncovered)}"


@pytest.mark.slow
def test_mil_interpreter_matches_coremltools_expected_values():
    cases = _slice()
    records = bench.run_mil_suite("raw", node_ids=sorted(set(cases.values())), timeout=600)
    wrong = [(r["test"], r["reason"]) for r in records if r["verdict"] in ("mismatched", "crashed", "refused")]
    assert not wrong
    matched = {op for r in records if r["verdict"] == "match" for op in r["ops"]}
    assert set(cases) <= matched, sorted(set(cases) - matched)


@pytest.mark.slow
def test_ops_coremltools_never_compares_match_torch_eager():
    records = bench.run_torch_peers()
    assert {r["target_op"] for r in records} == set(bench._torch_peer_cases())
    assert all(r["verdict"] == "match" for r in records), [(r["test"], r.get("reason")) for r in records]


def test_fp16_emulation_on_one_onnx_node_test_per_op():
    records = bench.run_fp16_suite(bench.one_case_per_op(bench.onnx_node_cases()))
    ran = [r for r in records if r["ort"] == "runs"]
    assert len(ran) >= 150   # ONNX Runtime runs one case of ~170 op types
    off = collections.Counter(r["off"]["verdict"] for r in ran)
    on = collections.Counter(r["on"]["verdict"] for r in ran)
    assert off["differs"] == off["crashed"] == 0, [(r["test"], r["off"]) for r in ran
                                                   if r["off"]["verdict"] in ("differs", "crashed")]
    assert on["mismatched"] == on["crashed"] == on["fp16 not applied"] == 0, [
        (r["test"], r["on"]) for r in ran if r["on"]["verdict"] in ("mismatched", "crashed", "fp16 not applied")]
    assert on["match"] >= 0.9 * len(ran)
