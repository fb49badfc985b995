"""The model diff joined to the decision diff (review/diff.py `cause`) and rendered (review/model_diff_text.py,
review/diff_html.py): a decision change on an op the model changed is the model's; next to one, the neighbourhood's;
on an unchanged op, the toolchain's when its versions moved, else unexplained. Hand-made reports and model diffs (the
contract's dict, written out), so each case is exact; tests/test_diff_model_only.py runs the real thing."""
import html as html_lib
import re

from markdown_it import MarkdownIt

from xc_core.review.diff import change_lines, diff_markdown, diff_reports, diff_text
from xc_core.review.diff_html import diff_html, model_diff_html
from xc_core.review.github import GITHUB_COMMENT_LIMIT, comment_body
from xc_core.review.model_diff_text import BY_MODULE_OVER, model_changes_markdown, model_changes_text

TID = "npu-sim"
# The captured graph of new: conv (blocks.0.conv) → relu (blocks.0.act) → view (an alias) → conv_1 (blocks.1.conv)
# → gelu (blocks.1.act) → linear (head). Base has relu_1 where new has gelu.
NEW_OPS = [("conv", "conv2d", "blocks.0.conv"), ("relu", "relu", "blocks.0.act"), ("view", "view", "blocks.0"),
           ("conv_1", "conv2d", "blocks.1.conv"), ("gelu", "gelu", "blocks.1.act"), ("linear", "linear", "head")]
BASE_OPS = [("relu_1", "relu", "blocks.1.act") if op == "gelu" else (op, t, m) for op, t, m in NEW_OPS]


def _captured(ops):
    nodes, previous = [], "x"
    for op, op_type, module in ops:
        nodes.append({"id": op, "op_type": op_type, "domain": "aten", "kind": "alias" if op_type == "view" else
                      "compute", "inputs": [{"name": previous}], "outputs": [{"name": op}], "attributes": {},
                      "module_path": module, "source_location": None})
        previous = op
    return nodes


def _report(sha: str, ops, on_cpu: set[str], versions: dict | None = None, precision: dict | None = None) -> dict:
    """A run of `ops` on TID: one compiled node per compute op, on the CPU (a fallback) when named in `on_cpu`."""
    compiled, rows = [], []
    for op, op_type, module in ops:
        if op_type == "view":
            continue
        fallback = op in on_cpu
        node = {"id": f"n_{op}", "op_type": op_type.upper(), "kind": "compute", "backend": "cpu" if fallback
                else "npu", "precision": (precision or {}).get(op, "fp16"), "source_ops": [op], "module_path": module,
                "fused_from": [], "fallback": fallback, "fallback_reason": "unsupported" if fallback else None,
                "measured_us": None, "inputs": [], "outputs": []}
        compiled.append(node)
        rows.append({"source_op": op, "op_type": op_type, "module_path": module, "targets": {TID: {
            "status": "fallback" if fallback else "present", "nodes": [node["id"]], "node": node["id"],
            "op_type": node["op_type"], "backend": node["backend"], "precision": node["precision"],
            "fused_with": [], "fallback_reason": None}}})
    target = {"status": "ok", "op_count_after": len(compiled), "accelerated": True, "accelerator": "NPU",
              "graph": {"nodes": compiled, "evidence": "predicted-runtime"},
              "evidence": {"assignment": "predicted-runtime"}}
    return {"source": {"name": "net.pt2", "kind": "exported-program", "sha256": sha * 64},
            "host": {"versions": versions or {"onnxruntime": "1.22.0"}}, "xc_version": "0.56",
            "capture": {"op_count_before": len(ops), "graph": {"nodes": _captured(ops)}},
            "alignment": {"source_ops": rows}, "targets": {TID: target}, "checklist": {"targets": {}}}


def _change(kind, module, op_type, base_node, new_node, base_op=None, detail=None, block=None):
    return {"kind": kind, "module_path": module, "op_type": op_type, "base_op": base_op, "base_node": base_node,
            "new_node": new_node, "detail": detail or {}, "block": block,
            "text": f"{kind}: {op_type} at {module}"}


def _model(changes=(), blocks=(), renamed=(), comparable=True, line=None, notes=()) -> dict:
    """A model diff as review/model_diff.py writes one (the contract's keys), from its changes."""
    summary = dict.fromkeys(("added", "removed", "replaced", "attributes", "shapes", "dtypes", "weights"), 0)
    status = {"base": {}, "new": {}}
    for c in changes:
        summary[c["kind"]] += 1
        word = c["kind"] if c["kind"] in ("added", "removed", "replaced") else "changed"
        if c["base_node"]:
            status["base"][c["base_node"]] = word
        if c["new_node"]:
            status["new"][c["new_node"]] = word
    summary["renamed_modules"] = len(renamed)
    side = {"label": "net.pt2", "family": "aten", "graph": "captured graph", "nodes": 6, "weights": 0,
            "values": False}
    return {"comparable": comparable, "line": line, "base": side, "new": side,
            "options": {"fields": ["ops", "attributes", "shapes", "dtypes", "weights"], "weight_rtol": 0.0,
                        "attribute_rtol": 0.0},
            "matched": 6, "summary": summary, "changes": list(changes), "blocks": list(blocks),
            "renamed_modules": list(renamed), "by_module": [], "node_status": status, "node_map": {},
            "notes": list(notes), "evidence": "measured"}


SWAP = _change("replaced", "blocks.1.act", "gelu", "relu_1", "gelu", base_op="relu")


def _fallback_causes(d: dict, way: str = "added") -> dict:
    return {f["op_type"]: f["cause"] for f in d["targets"][TID]["fallbacks"][way]}


def test_a_fallback_on_a_replaced_op_is_the_models_and_its_line_says_so():
    d = diff_reports(_report("a", BASE_OPS, set()), _report("b", NEW_OPS, {"gelu"}), model=_model([SWAP]))
    cause = _fallback_causes(d)["GELU"]
    assert cause["kind"] == "model" and cause["change"] == "replaced" and cause["module_path"] == "blocks.1.act"
    line = next(line for tid, line in change_lines(d) if "new CPU fallback" in line)
    assert line.endswith("— replaced in new (relu → gelu)"), line
    assert d["model"]["changes"] == [SWAP] and "source_ops" in d     # the old key stays for scripts


def test_a_fallback_next_to_a_changed_op_is_the_neighbourhoods_even_through_a_view():
    # linear reads gelu's output: a neighbour of the replaced op.
    d = diff_reports(_report("a", BASE_OPS, set()), _report("b", NEW_OPS, {"linear"}), model=_model([SWAP]))
    cause = _fallback_causes(d)["LINEAR"]
    assert cause["kind"] == "neighbourhood" and cause["node"] == "gelu" and cause["change"] == "replaced"
    assert cause["text"] == "on an unchanged op next to blocks.1.act (replaced: relu → gelu)"
    # conv_1 reads relu through a view (an alias, no computation): relu's attribute change is next to it.
    attrs = _change("attributes", "blocks.0.act", "relu", "relu", "relu", detail={"inplace": [False, True]})
    d = diff_reports(_report("a", NEW_OPS, set()), _report("b", NEW_OPS, {"conv_1"}), model=_model([attrs]))
    cause = _fallback_causes(d)["CONV2D"]
    assert cause["kind"] == "neighbourhood" and cause["node"] == "relu" and cause["change"] == "attributes"


def test_a_decision_change_on_an_unchanged_op_is_the_toolchains_or_unexplained():
    base = _report("a", NEW_OPS, set())
    # Same model section, same versions: the compiler decided differently — nothing xc can name.
    d = diff_reports(base, _report("b", NEW_OPS, {"conv"}), model=_model())
    assert _fallback_causes(d)["CONV2D"] == {"kind": "unexplained", "text": "unchanged model and toolchain"}
    assert any(line.endswith("— unchanged model and toolchain") for _, line in change_lines(d))
    # The model changed elsewhere (far from conv): said, still not blamed on the model or the toolchain.
    far = _change("weights", "head.fc", "linear", "linear", "linear", detail={"tensors": []})
    d = diff_reports(base, _report("b", NEW_OPS, {"conv"}), model=_model([far]))
    assert _fallback_causes(d)["CONV2D"] == {
        "kind": "unexplained", "text": "on an unchanged op, same toolchain (the model changed elsewhere)"}
    # Another onnxruntime on the new run: the toolchain's.
    d = diff_reports(base, _report("b", NEW_OPS, {"conv"}, versions={"onnxruntime": "1.23.0"}), model=_model())
    cause = _fallback_causes(d)["CONV2D"]
    assert cause["kind"] == "toolchain" and cause["versions"] == {"onnxruntime": {"base": "1.22.0", "new": "1.23.0"}}
    assert cause["text"] == "unchanged model; toolchain onnxruntime 1.22.0 → 1.23.0"
    # A weight change far away explains nothing here.
    far = _change("weights", "head", "linear", "linear", "linear", detail={"tensors": []})
    d = diff_reports(base, _report("b", NEW_OPS, {"conv"}), model=_model([far]))
    assert _fallback_causes(d)["CONV2D"]["kind"] == "unexplained"
    # A run without a captured graph (an older or a hand-made report): whether the model changed there is unknown.
    blind = _report("b", NEW_OPS, {"conv"})
    blind["capture"] = {"op_count_before": len(NEW_OPS)}
    d = diff_reports(base, blind, model=_model())
    assert _fallback_causes(d)["CONV2D"] == {"kind": "unknown", "text": None}
    assert "new CPU fallback: CONV2D at blocks.0.conv (unsupported)" in [line for _, line in change_lines(d)]


def test_a_fallback_gone_with_its_op_and_a_precision_change_get_causes_on_their_own_side():
    removed = _change("removed", "blocks.1.act", "relu", "relu_1", None)
    added = _change("added", "blocks.1.act", "gelu", None, "gelu")
    model = _model([removed, added])
    d = diff_reports(_report("a", BASE_OPS, {"relu_1"}), _report("b", NEW_OPS, set(), precision={"conv_1": "fp32"}),
                     model=model)
    gone = _fallback_causes(d, "removed")["RELU"]
    assert gone["kind"] == "model" and gone["change"] == "removed" and gone["node"] == "relu_1"
    change = d["targets"][TID]["precision_changes"][0]
    assert change["source_op"] == "conv_1" and change["cause"]["kind"] == "neighbourhood"
    assert change["cause"]["node"] == "gelu" and change["cause"]["change"] == "added"


def test_models_that_cannot_be_lined_up_say_their_one_line_after_the_different_models_note():
    line = "base and new have nothing in common beyond 2 ops (conv2d, linear)"
    model = _model(comparable=False, line=line)
    other = {**_report("b", NEW_OPS, {"gelu"}), "source": {"name": "other.onnx", "kind": "onnx",
                                                         "sha256": "b" * 64}}
    other["alignment"]["source_ops"] = []           # nothing lines up by module path either
    d = diff_reports(_report("a", BASE_OPS, set()), other, model=model)
    assert _fallback_causes(d)["GELU"]["kind"] == "incomparable"
    text_lines = diff_text(d).splitlines()
    assert text_lines[0].startswith("NOTE: base and new are different models")
    assert f"Model changes: {line}" in text_lines
    assert model_changes_text(model) == f"Model changes: {line}\n"      # one line, nothing else
    assert model_changes_markdown(model) == f"**Model changes:** {line}\n"


def _many_changes(n: int) -> dict:
    changes = [_change("weights", f"layers.{i}.fc", "linear", f"l{i}", f"l{i}", detail={"tensors": [
        {"name": f"layers.{i}.fc.weight", "base_name": f"layers.{i}.fc.weight", "shape": [4, 4], "numel": 16,
         "rel_l2": 0.05, "rel_l2_bound": "lower", "base_sha256": "0" * 64, "new_sha256": "1" * 64}]})
               for i in range(n)]
    model = _model(changes)
    model["by_module"] = [{"module_path": "layers", "added": 0, "removed": 0, "replaced": 0, "changed": n}]
    return model


def test_the_pr_comment_opens_with_model_changes_and_collapses_beyond_the_first_lines():
    d = diff_reports(_report("a", NEW_OPS, set()), _report("b", NEW_OPS, set()), model=_many_changes(12))
    body, truncated = comment_body(diff_markdown(d))
    assert not truncated
    lines = body.splitlines()
    # The marker, the title, the sha line, then the model changes — before any table of decisions.
    assert lines[1].startswith("### xc diff") and lines[2].startswith("base sha256")
    assert lines[4] == "**Model changes:** weights changed on 12 ops"
    first_table = next(i for i, line in enumerate(lines) if line.startswith("| target"))
    shown = [line for line in lines[:first_table] if line.startswith("- weights changed")]
    assert len(shown) == 12
    details = lines.index("<details><summary>4 more model changes</summary>")
    assert sum(line.startswith("- ") for line in lines[5:details]) == 8 and details < first_table
    assert "rel L2 ≥ 0.05 (lower bound, from the norms)" in body


def test_a_huge_model_diff_is_a_table_by_module_and_the_comment_fits():
    model = _many_changes(BY_MODULE_OVER + 50)
    d = diff_reports(_report("a", NEW_OPS, set()), _report("b", NEW_OPS, set()), model=model)
    md = diff_markdown(d)
    assert "| module | added | removed | replaced | changed |" in md and "| `layers` | 0 | 0 | 0 | 250 |" in md
    assert "layers.7.fc.weight" not in md               # the list is in the JSON diff, not the comment
    body, truncated = comment_body(md)
    assert not truncated and len(body) < GITHUB_COMMENT_LIMIT
    assert "by module" in model_changes_text(model) and "layers.7.fc" not in model_changes_text(model)


HOSTILE = "blocks.<img src=x onerror=alert(1)>|@octo-team [x](http://e.vil)\x1b[2J"


def test_model_names_are_inert_in_markdown_text_and_html():
    model = _model([_change("replaced", HOSTILE, "gelu`*", "relu_1", "gelu", base_op="relu")],
                   renamed=[{"base": HOSTILE, "new": "layers.2", "why": "renumbered"}])
    rendered = MarkdownIt("commonmark").enable("table").render(model_changes_markdown(model))
    assert "<img" not in rendered and "<a " not in rendered and "\x1b" not in rendered
    # A name that shows as itself is a code span; a hostile one is escaped inert text: outside code spans no
    # mention (a word joiner after "@"), no link ("://" broken), no escape.
    outside = re.sub(r"<code>.*?</code>", "", rendered)
    assert "@octo-team" not in outside and "http://" not in outside and "@\u2060octo-team" in outside
    assert "<code>layers.2</code>" in rendered
    text = model_changes_text(model)
    assert "\x1b" not in text and all(line.isprintable() for line in text.splitlines())
    d = diff_reports(_report("a", BASE_OPS, set()), _report("b", NEW_OPS, {"gelu"}), model=model)
    for page in (diff_html(d, []), model_diff_html(model, "base <b>", "new")):
        assert "<img src=x" not in page and "\x1b" not in page
        assert html_lib.escape("<img src=x onerror=alert(1)>") in page
    assert "<h2>Model changes</h2>" in page and "base &lt;b&gt;" in page
    whole = diff_html(d, [])
    assert whole.index('id="model"') < whole.index('id="decisions"')
