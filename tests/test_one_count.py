"""One count per fact (issue 50): a target's split of its compiled ops — on the accelerator, on the CPU as unsupported
or outside the delegated partition — reads the same on the Overview card, the Fallbacks page and its rows, the CLI
table and the Markdown; where a runtime's own count and xc's placement disagree, that is one labelled finding with
each figure's evidence; the Overview's metrics say what they count; Topology says what its node count holds.

A hand-made litert-gpu block in the shape the build writes (a report from before xc read the GPU delegate's
refusals per node: its note says the delegate ran 6 ops where xc placed 3) sits in a real report of a small model;
the GPU delegate's words are parsed and placed on a graph built by hand; and one real litert-gpu analysis, where the
delegate refuses nodes by their tensors' names, checks that its own count and xc's placement now agree."""
import copy
import dataclasses
import os

import pytest

torch = pytest.importorskip("torch")

from xc_core.views import target_counts as counts  # noqa: E402

GPU = "litert-gpu"
OLD_NOTE = ("the GPU delegate said 6 op(s) run on the GPU; xc placed 3 from its words per op type (an op type it "
            "refuses only in some nodes is marked CPU everywhere)")
OUTSIDE = ("supported, but outside the GPU delegate's largest partition (it delegates one partition: "
           "max_delegated_partitions = 1)")
SAID = ("Following operations are not supported by GPU delegate:\nBROADCAST_TO: Operation is not supported.\n"
        "RESHAPE: Tensor dimensions must be less than 5. t2\n"
        "6 operations will run on the GPU, and the remaining 4 operations will run on the CPU.")


class Attention(torch.nn.Module):
    """A linear, a transpose and a reshape back: ORT keeps the Transpose as a layout node (drawn on Topology, not
    counted among the compiled ops)."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(8, 8)

    def forward(self, x):                          # x: (1, 4, 8)
        h = self.q(x).reshape(1, 4, 2, 4).transpose(1, 2)
        return torch.relu(h.transpose(1, 2).reshape(1, 4, 8) + x)


class FiveD(torch.nn.Module):
    """A reshape to 5-D and back: LiteRT's GPU delegate refuses the nodes that touch the 5-D tensors and names them
    by their tensors ("RESHAPE: Tensor dimensions must be less than 5. <tensor>"); the ops around them it takes."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):                          # x: (1, 4, 8)
        y = torch.tanh(self.fc(x)).reshape(1, 2, 2, 8)
        z = (y.reshape(1, 2, 2, 2, 4) * 2).reshape(1, 4, 8)
        return torch.sigmoid(z + x)


def _analyze(tmp, module, targets):
    from xc_core.api import analyze
    path = os.path.join(tmp, "net.pt2")
    torch.manual_seed(0)
    torch.export.save(torch.export.export(module.eval(), (torch.randn(1, 4, 8),)), path)
    return analyze(path, list(targets), out_dir=os.path.join(tmp, "out"))


def _node(nid, op, backend, reason=None, kind="compute", inputs=(), outputs=()):
    return {"id": nid, "op_type": op, "domain": "tflite", "kind": kind, "backend": backend,
            "kernel": ("LiteRT GPU delegate (ML Drift)" if backend == "gpu"
                       else "LiteRT CPU (XNNPACK / built-in kernels)"),
            "precision": "fp32", "fallback": reason is not None, "fallback_reason": reason, "attributes": {},
            "inputs": [{"name": t, "shape": [1, 8], "dtype": "float32"} for t in inputs],
            "outputs": [{"name": t, "shape": [1, 8], "dtype": "float32"} for t in outputs],
            "source_ops": [], "module_path": "q", "fused_from": [], "measured_us": None}


def _old_gpu_block(like: dict) -> dict:
    """litert-gpu as an xc before this change wrote it: every RESHAPE refused although the delegate named one, so
    xc placed 3 of the 10 ops on the GPU where the delegate said 6 — 9 compiled ops and one TRANSPOSE."""
    from xc_core.analysis.boundaries import boundaries
    from xc_core.ir import Graph
    refused = "the GPU delegate: Tensor dimensions must be less than 5. t2"
    nodes = [_node("add_0", "ADD", "gpu", outputs=["t0"]), _node("mul_1", "MUL", "gpu", inputs=["t0"], outputs=["t1"]),
             _node("reshape_2", "RESHAPE", "cpu", refused, inputs=["t1"], outputs=["t2"]),
             _node("fully_connected_3", "FULLY_CONNECTED", "cpu", OUTSIDE, inputs=["t2"], outputs=["t3"]),
             _node("add_4", "ADD", "cpu", OUTSIDE, inputs=["t3"], outputs=["t4"]),
             _node("transpose_5", "TRANSPOSE", "cpu", None, kind="layout", inputs=["t4"], outputs=["t5"]),
             _node("softmax_6", "SOFTMAX", "gpu", inputs=["t5"], outputs=["t6"]),
             _node("reshape_7", "RESHAPE", "cpu", refused, inputs=["t6"], outputs=["t7"]),
             _node("mul_8", "MUL", "cpu", OUTSIDE, inputs=["t7"], outputs=["t8"]),
             _node("broadcast_to_9", "BROADCAST_TO", "cpu", "the GPU delegate: Operation is not supported.",
                   inputs=["t8"], outputs=["t9"])]
    t = copy.deepcopy(like)
    t.update({"id": GPU, "identity": GPU, "label": "LiteRT · GPU delegate", "accelerated": True,
              "accelerator": "GPU delegate (mobile GPU)", "op_count_after": 9, "notes": [OLD_NOTE],
              "evidence": {"assignment": "predicted-runtime", "precision": "predicted-runtime",
                           "numerics": "emulated"},
              "graph": {"evidence": "predicted-runtime", "nodes": nodes}, "node_times": None,
              "compute_share": None})      # an xc before this change weighed no share
    t["info"] = {"partitioning": {
        "ep": "GPU", "decided_by": "LiteRT's GPU delegate (its partitioning, on SwiftShader)", "num_nodes": 9,
        "num_supported_nodes": 3, "num_partitions": 1, "partition_sizes": [3],
        "unsupported_ops": ["ADD", "BROADCAST_TO", "FULLY_CONNECTED", "MUL", "RESHAPE"],
        "accelerated_share_nodes": 0.3333, "fully_accelerated": False, "delegate_said": SAID,
        "evidence": "predicted-runtime"},
        "boundaries": {**boundaries(Graph.from_dict({"name": "m", "stage": GPU, "nodes": nodes, "inputs": [],
                                                     "outputs": []})), "evidence": "predicted-runtime"}}
    return t


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A real report of a small model on ort-cpu and ort-nnapi, with the hand-made litert-gpu block first."""
    base = _analyze(str(tmp_path_factory.mktemp("one-count")), Attention(), ("ort-cpu", "ort-nnapi"))
    r = copy.deepcopy(base)
    r["targets"] = {GPU: _old_gpu_block(base["targets"]["ort-nnapi"]), **base["targets"]}
    items = copy.deepcopy(base["checklist"]["targets"]["ort-nnapi"])
    for i in items:
        if i["id"] == 2:
            i.update(verdict="fail",
                     detail="6 compiled op(s) on the CPU (ADD, BROADCAST_TO, FULLY_CONNECTED, MUL, RESHAPE), "
                            "4 boundaries")
    r["checklist"]["targets"] = {GPU: items, **r["checklist"]["targets"]}
    return r


SPLIT = ("3 of 9 compiled ops (33%) on the GPU delegate · 6 on the CPU: 3 unsupported, 3 supported, but outside "
         "the delegated partition")


def test_the_split_is_one_sentence_on_every_surface(report):
    from xc_core.cli import summary_table
    from xc_core.review.html import report_html
    from xc_core.review.markdown import report_markdown
    from xc_core.views.fallbacks import split_summary
    from xc_core.views.rows import overview_rows, target_summary_rows, verdict_line
    s = counts.split_counts(report, GPU)
    assert s["text"] == SPLIT                             # compiled ops; the TRANSPOSE is no compiled op
    card = next(r for r in target_summary_rows(report) if r["target"] == GPU)
    assert card["accelerator"] == SPLIT and card["ops"].endswith("→ 9 compiled")
    assert next(r for r in overview_rows(report) if r["target"] == GPU)[counts.SPLIT_COLUMN] == SPLIT
    assert split_summary(report, GPU)["split"]["text"] == SPLIT
    assert SPLIT in summary_table(report)
    md = report_markdown(report)
    assert md.count(SPLIT) == 2                           # the headline and the target table
    assert "accelerated, " not in md and "% nodes" not in md                # the old, unlabelled figures
    html = report_html(report)
    assert SPLIT in html
    # The one-line verdict counts what the split counts.
    assert "6 ops fall back to the CPU" in verdict_line(report, GPU)


def test_unsupported_is_only_what_the_delegate_cannot_run(report):
    from xc_core.views.fallbacks import fallback_rows, split_summary
    s = split_summary(report, GPU)
    assert s["cpu_type_lines"] == [
        "Unsupported (the GPU delegate cannot run them): BROADCAST_TO, RESHAPE ×2",
        "Supported, but outside the delegated partition: ADD, FULLY_CONNECTED, MUL"]
    rows = fallback_rows(report, GPU)
    kinds = {r["node"]: r["on the CPU as"] for r in rows}
    assert sorted(kinds.values()).count("unsupported") == s["split"]["unsupported"] == 3
    assert sorted(kinds.values()).count(counts.OUTSIDE_LABEL) == s["split"]["outside_partition"] == 3
    assert kinds["mul_8"] == counts.OUTSIDE_LABEL and kinds["broadcast_to_9"] == "unsupported"
    assert "transpose_5" not in kinds                     # a layout move the target did not flag as a fallback


def test_the_delegates_count_against_xcs_placement_is_one_labelled_finding(report):
    from xc_core.cli import summary_table
    from xc_core.review.markdown import report_markdown
    check = counts.count_check(report, GPU)
    assert not check["agree"] and (check["runtime"]["on_accelerator"], check["placed"], check["ops"]) == (6, 3, 10)
    text = check["text"]
    assert text.startswith("Counts disagree: the GPU delegate reports it takes 6 of 10 ops "
                           "(predicted-runtime: its own count, every op of the .tflite, layout ops included); xc's "
                           "placement on the graph (predicted-runtime) counts 3 of 10 — this report predates")
    assert counts.count_findings(report) == [(GPU, text)]      # the ORT target's checker agrees: no finding
    assert summary_table(report).count(text) == 1
    assert report_markdown(report).count(text) == 1
    # The old note said it unlabelled; it is not said again beside the finding.
    assert OLD_NOTE not in counts.target_notes(report["targets"][GPU])


def test_a_runtime_count_that_agrees_is_no_finding(report):
    """ORT's partition checker counts every node of the graph it checked (layout nodes too): xc's placement on the
    same nodes agrees; the split counts the compiled ops."""
    check = counts.count_check(report, "ort-nnapi")
    part = report["targets"]["ort-nnapi"]["info"]["partitioning"]
    assert check["agree"] and check["placed"] == part["num_supported_nodes"] and check["ops"] == part["num_nodes"]
    assert "counts the same" in check["text"] and "Counts disagree" not in check["text"]
    s = counts.split_counts(report, "ort-nnapi")
    assert s["compute"] == report["targets"]["ort-nnapi"]["op_count_after"]
    assert counts.split_counts(report, "ort-cpu") is None                # no accelerator: no split


def test_topology_says_what_its_node_count_holds(report):
    from xc_core.views import graph_layout, topology
    t = report["targets"]["ort-cpu"]
    tree = topology.build_tree(graph_layout.prepare(t["graph"], t.get("fusions")))
    v = topology.view(tree, set())
    caption = topology.count_caption(t, v)
    layout = sum(n["kind"] == "layout" for n in t["graph"]["nodes"])
    assert layout, "the model's transposes are layout nodes"
    assert caption.startswith(f"{t['op_count_after'] + layout} nodes drawn: {t['op_count_after']} compiled ops + "
                              f"{layout} layout move")
    assert v["n_nodes"] == t["op_count_after"] + layout              # what the drawing holds, said as such
    # Its fallbacks, counted as the split counts them: compiled ops, and a flagged layout move apart.
    gpu = report["targets"][GPU]
    prep = graph_layout.prepare(gpu["graph"], gpu.get("fusions"))
    assert topology.fallback_caption(gpu, prep.nodes).startswith(
        f"{counts.split_counts(report, GPU)['on_cpu']} compiled ops on the CPU as fallback")
    flagged = [dataclasses.replace(n, fallback=True) if n.kind == "layout" else n for n in prep.nodes]
    assert topology.fallback_caption(gpu, flagged) == "6 compiled ops on the CPU as fallback and 1 layout move"
    assert counts.op_counts(t)["text"] == f"{t['op_count_after']} compiled ops (from {t['op_count_before']} source ops)"


def _verdicts(report: dict, **by_target) -> dict:
    """A copy whose checklist gives each named target one verdict on question 2 and passes the rest."""
    r = copy.deepcopy(report)
    for tid, items in r["checklist"]["targets"].items():
        for i in items:
            i["verdict"] = by_target.get(tid.replace("-", "_"), "pass") if i["id"] == 2 else "pass"
    return r


def test_the_overview_metrics_say_what_they_count(report):
    r = _verdicts(report, litert_gpu="fail", ort_nnapi="warn")
    r["targets"]["ort-cpu"]["info"]["numerics_not_run"] = "not run on this host"
    c = counts.run_counts(r)
    assert (c["targets"], c["compiled"], c["ran"], c["compiled_only"]) == (3, 3, 2, 1)
    assert (c["failing"], c["warning"]) == (1, 1)       # a target that compiled and ran can still fail a question


def test_overview_page(report):
    from test_pages import _page_with_report
    at = _page_with_report("overview", _verdicts(report, litert_gpu="fail", ort_nnapi="fail"))
    metrics = {m.label: m.value for m in at.metric}
    assert "Targets OK" not in metrics
    assert metrics["Compiled and ran"] == "3 of 3" and metrics["Checklist: targets failing"] == "2 of 3"
    table = at.table[0].value
    cells = [str(v).replace("\\", "") for v in table["accelerator"]]
    assert SPLIT in cells
    findings = [w.value.replace("\\", "") for w in at.warning if "Counts disagree" in w.value.replace("\\", "")]
    assert len(findings) == 1 and counts.count_check(report, GPU)["text"] in findings[0]
    assert not any(OLD_NOTE in c.value.replace("\\", "") for c in at.caption)


def test_fallbacks_page(report):
    from test_pages import _page_with_report
    at = _page_with_report("fallbacks", report)
    captions = [c.value.replace("\\", "") for c in at.caption]
    assert any(c.startswith(SPLIT) for c in captions)
    assert "Unsupported (the GPU delegate cannot run them): BROADCAST_TO, RESHAPE ×2" in captions
    assert any("Counts disagree" in w.value.replace("\\", "") for w in at.warning)
    assert any("counts the same" in c for c in captions)            # ort-nnapi: its checker agrees


# ---- the GPU delegate's words, placed -------------------------------------------------------------------------------
def _ir(nodes):
    from xc_core.ir import COMPUTE, LAYOUT, Graph, Node, TensorInfo
    g = Graph(name="m", stage="litert-gpu")
    for nid, op, ins, outs in nodes:
        g.nodes.append(Node(id=nid, op_type=op, kind=LAYOUT if op == "TRANSPOSE" else COMPUTE,
                            inputs=[TensorInfo(name=t) for t in ins], outputs=[TensorInfo(name=t) for t in outs]))
    return g


@pytest.mark.slow
def test_the_delegates_refusals_are_placed_per_node_and_its_count_kept():
    from xc_core.targets.litert import gpu
    g = _ir([("fc_0", "FULLY_CONNECTED", ["x"], ["a"]), ("reshape_1", "RESHAPE", ["a"], ["m;21"]),
             ("mul_2", "MUL", ["m;21"], ["b"]), ("reshape_3", "RESHAPE", ["b"], ["c"]),
             ("transpose_4", "TRANSPOSE", ["c"], ["d"]), ("tanh_5", "TANH", ["d"], ["y"])])
    said = gpu._delegate_words("junk\nFollowing operations are not supported by GPU delegate:\n"
                               "RESHAPE: Tensor dimensions must be less than 5. m;21\n"
                               "MUL: Tensor dimensions must be less than 5. m;21\n"
                               "3 operations will run on the GPU, and the remaining 3 operations will run on the CPU.")
    assert (said["on_gpu"], said["on_cpu"]) == (3, 3)
    refused, unmatched = gpu._refused_nodes(g, said["refusals"])
    # Only the RESHAPE that writes the named tensor, not the other one; the MUL that reads it.
    assert refused == {"reshape_1": "Tensor dimensions must be less than 5.",
                       "mul_2": "Tensor dimensions must be less than 5."} and unmatched == []
    for n in g.nodes:
        n.backend = "cpu" if n.id in refused else "gpu"
    gpu._outside_largest_partition(g)
    assert [n.id for n in g.nodes if n.backend == "gpu"] == ["reshape_3", "transpose_4", "tanh_5"]
    assert next(n for n in g.nodes if n.id == "fc_0").fallback_reason == gpu.OUTSIDE_PARTITION_REASON
    count = gpu._delegate_count(g, said, False, unmatched)["runtime_count"]
    assert (count["on_accelerator"], count["total"]) == (3, 6) and "gap" not in count
    # A refusal naming a tensor no node has refuses the whole type, and the count then says why it differs.
    said = gpu._delegate_words("Following operations are not supported by GPU delegate:\n"
                               "RESHAPE: Tensor dimensions must be less than 5. other;9\n"
                               "5 operations will run on the GPU, and the remaining 1 operations will run on the CPU.")
    refused, unmatched = gpu._refused_nodes(g, said["refusals"])
    assert set(refused) == {"reshape_1", "reshape_3"} and unmatched == ["RESHAPE"]
    for n in g.nodes:
        n.backend = "cpu" if n.id in refused else "gpu"
    assert "naming a tensor xc's graph does not have" in gpu._delegate_count(g, said, False, unmatched)[
        "runtime_count"]["gap"]


@pytest.mark.slow
def test_a_real_gpu_delegate_and_xcs_placement_agree(tmp_path):
    """The delegate refuses the three nodes that touch a 5-D tensor, by name, and takes the largest of the two
    partitions left: xc's placement and its own count ("2 operations will run on the GPU …") agree, and every view
    says the same split."""
    from xc_core.cli import summary_table
    from xc_core.review.markdown import report_markdown
    from xc_core.views.fallbacks import fallback_rows
    from xc_core.views.rows import target_summary_rows
    pytest.importorskip("litert_torch")
    report = _analyze(str(tmp_path), FiveD(), (GPU,))
    t = report["targets"][GPU]
    if t["status"] == "unavailable":
        pytest.skip(t["error"])
    assert t["status"] == "ok", t["error"]
    check = counts.count_check(report, GPU)
    assert check["agree"] and (check["placed"], check["ops"]) == (2, 7), check["text"]
    s = counts.split_counts(report, GPU)
    assert s["text"] == ("2 of 7 compiled ops (29%) on the GPU delegate · 5 on the CPU: 3 unsupported, 2 supported, "
                         "but outside the delegated partition")
    assert {r["op_type"] for r in fallback_rows(report, GPU) if r["on the CPU as"] == "unsupported"} == {"RESHAPE",
                                                                                                        "MUL"}
    # The Overview's cell: the count, then what it weighs (views/compute_share.py).
    assert target_summary_rows(report)[0]["accelerator"].startswith(s["text"] + " · by compute: ")
    assert s["text"] in summary_table(report) and s["text"] in report_markdown(report)
    assert counts.count_findings(report) == []
    # The checklist's question 2 counts the same compiled ops.
    q2 = next(i for i in report["checklist"]["targets"][GPU] if i["id"] == 2)
    assert q2["detail"].startswith(f"{s['on_cpu']} compiled op(s) on the CPU ("), q2["detail"]
