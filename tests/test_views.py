"""The status line above every page: never "Compiled" when nothing compiled, and the likely cause when it did not."""
from xc_core.views.rows import run_status


def _report(targets: dict, reference: str = "ok") -> dict:
    blocks = {}
    for tid, (status, stage, error) in targets.items():
        blocks[tid] = {"status": status, "error_stage": stage,
                       "error": f"{stage} failed: {error}" if status == "error" else None}
    return {"targets": blocks, "reference": {"status": reference}}


def test_some_ok_is_compiled_with_counts():
    label, state = run_status(_report({"ort-cpu": ("ok", None, None), "openvino-cpu": ("error", "compile", "x")}))
    assert (label, state) == ("Compiled: 1 ok, 1 failed", "complete")


def test_every_target_failing_at_run_points_at_the_inputs():
    label, state = run_status(_report({"ort-cpu": ("error", "run", "Concat node '/Concat': dims differ"),
                                       "openvino-cpu": ("error", "run", "Concat: shapes differ")}))
    assert state == "error" and label.startswith("No target compiled: 0 ok, 2 failed")
    assert "inputs likely do not fit" in label and "set the input shapes" in label and "--" not in label


def test_one_message_everywhere_is_quoted():
    label, _ = run_status(_report({"ort-cpu": ("error", "compile", "opset 99 is not supported"),
                                   "openvino-cpu": ("error", "compile", "opset 99 is not supported")}))
    assert label.endswith("each says: opset 99 is not supported")


def test_different_failures_send_the_reader_to_each_error():
    label, _ = run_status(_report({"ort-cpu": ("error", "compile", "a"), "openvino-cpu": ("error", "inspect", "b")}))
    assert label.endswith("each target's error is on the Overview")


def test_a_failed_reference_says_so_first():
    label, state = run_status(_report({"ort-cpu": ("error", "run", "a")}, reference="error"))
    assert state == "error" and label.startswith("The reference itself failed with the inputs xc picked")


def test_default_pairs_follow_the_reports_target_order():
    """The Overview offers every pair in the report's order; a default pair in the other order would not be one of
    its options (a crash of the page, seen with --targets coreml-ane,...,ort-nnapi)."""
    import itertools
    from xc_core.views.rows import default_pairs
    order = ["ort-cpu", "ort-cpu[level=basic]", "coreml-ane", "ort-coreml", "inductor-cpu"]
    report = {"targets": {t: {"graph": {"nodes": []}} for t in order}}
    offered = set(itertools.combinations(order, 2))
    pairs = default_pairs(report, limit=10)
    assert pairs[0] == ("ort-cpu", "ort-cpu[level=basic]")
    assert ("coreml-ane", "ort-coreml") in pairs and all(p in offered for p in pairs)
