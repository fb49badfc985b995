"""Topology benchmark: how long the Topology page's pieces take on a large synthetic graph, in process and in
headless Chromium, beside Netron's numbers for a 20,000-node graph.

    python bench/topology_bench.py --nodes 20000              # in-process: prepare, hierarchy, first drawing, expand
    python bench/topology_bench.py --nodes 20000 --browser    # + first render and expanding a group in Chromium
    python bench/topology_bench.py --nodes 20000 --flat       # the same graph without module paths (a flat ONNX):
                                                              # the hierarchy comes from runs of the node order

The synthetic report looks like a transformer export: a chain of blocks `blocks.i`, each of `layer.j` with
`attn` / `mlp` sub-modules (norm → q/k/v branches → softmax → projection → residual add; norm → MLP → residual
add), plus residual adds at block level. Two targets are derived from it the way compilers differ: `ort-cpu` fuses
MatMul+Add and inserts transposes; `ort-nnapi` runs fp16 on NNAPI, falls LayerNorm/Gelu back to the CPU with casts
around them, and drops some reshapes. The alignment is computed by xc's own `source_op_table`.

In-process steps run side by side in one process, each `--repeat` times (time.perf_counter, median printed), with
its ratio to the floor: one `dot` call on a 2-node drawing (Graphviz's own start-up). Browser runs: each repeat is a
new tab (new session); run 1 has cold caches. Netron, measured on the same kind of flat transformer ONNX on this
kind of machine, takes 1.9 s at 1,280 nodes, 5.9 s at 5,120 and 20.7 s at 20,000 from file accepted to graph drawn
(and draws every node; Model Explorer did not finish a flat 5,120-node graph).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

OPS_PER_LAYER = 25
LAYERS_PER_BLOCK = 8


# ------------------------------------------------------------------------------------------- synthetic report

def _t(name: str, dtype: str = "float32") -> dict:
    return {"name": name, "shape": [1, 128, 768], "dtype": dtype}


def _node(nid, op, ins, outs, module, **kw) -> dict:
    n = {"id": nid, "op_type": op, "domain": "", "kind": "compute", "inputs": [_t(i) for i in ins],
         "outputs": [_t(o) for o in outs], "attributes": {}, "backend": None, "kernel": None, "precision": "fp32",
         "source_ops": [], "module_path": module, "source_location": None, "fused_from": [], "fallback": False,
         "fallback_reason": None}
    n.update(kw)
    return n


def source_graph(blocks: int, layers: int = LAYERS_PER_BLOCK) -> dict:
    """The captured graph: every node a source op (its own id), module paths blocks.i.layer.j.{attn,mlp}."""
    nodes = []

    def add(op, ins, module):
        nid = f"{op.lower()}_{len(nodes)}"
        nodes.append(_node(nid, op, ins, [nid], module, source_ops=[nid]))
        return nid

    x = add("Embedding", ["tokens"], "embed")
    for i in range(blocks):
        block_in = x
        for j in range(layers):
            attn, mlp = f"blocks.{i}.layer.{j}.attn", f"blocks.{i}.layer.{j}.mlp"
            h = add("LayerNormalization", [x], attn)
            qkv = []
            for _ in "qkv":
                m = add("MatMul", [h], attn)
                a = add("Add", [m], attn)
                qkv.append(add("Reshape", [a], attn))
            s = add("MatMul", [qkv[0], qkv[1]], attn)
            s = add("Softmax", [s], attn)
            s = add("Dropout", [s], attn)
            o = add("MatMul", [s, qkv[2]], attn)
            o = add("Reshape", [o], attn)
            o = add("MatMul", [o], attn)
            o = add("Add", [o], attn)
            x = add("Add", [x, o], f"blocks.{i}.layer.{j}")
            h = add("LayerNormalization", [x], mlp)
            h = add("MatMul", [h], mlp)
            h = add("Add", [h], mlp)
            h = add("Gelu", [h], mlp)
            h = add("MatMul", [h], mlp)
            h = add("Add", [h], mlp)
            x = add("Add", [x, h], f"blocks.{i}.layer.{j}")
        x = add("Add", [block_in, x], f"blocks.{i}")        # block-level residual: a long edge
    x = add("LayerNormalization", [x], "head")
    x = add("MatMul", [x], "head")
    return {"name": "synthetic", "stage": "captured", "inputs": [_t("tokens", "int64")], "outputs": [_t(x)],
            "nodes": nodes}


def _target_graph(src: dict, tid: str) -> tuple[dict, dict]:
    """A compiled graph derived from the source graph, and its fusion groups."""
    by_out = {n["outputs"][0]["name"]: n for n in src["nodes"]}
    consumers: dict[str, list[dict]] = {}
    for n in src["nodes"]:
        for t in n["inputs"]:
            consumers.setdefault(t["name"], []).append(n)
    rename: dict[str, str] = {}           # source tensor → the tensor that carries it on the target
    out, groups, absorbed = [], [], set()
    accel = tid == "ort-nnapi"

    def r(name):
        while name in rename:
            name = rename[name]
        return name

    for k, n in enumerate(src["nodes"]):
        nid, op = n["id"], n["op_type"]
        if nid in absorbed:
            continue
        ins = [r(t["name"]) for t in n["inputs"]]
        if op == "Dropout" or (accel and op == "Reshape" and k % 3 == 0):
            rename[n["outputs"][0]["name"]] = ins[0]        # eliminated: absent on this target
            continue
        base = {"backend": "nnapi" if accel else "cpu", "kernel": "NnapiExecutionProvider" if accel
                else "CPUExecutionProvider", "precision": "fp16" if accel else "fp32"}
        cons = consumers.get(n["outputs"][0]["name"], [])
        if not accel and op == "MatMul" and len(cons) == 1 and cons[0]["op_type"] == "Add":
            add = cons[0]
            absorbed.add(add["id"])
            rename[add["outputs"][0]["name"]] = n["outputs"][0]["name"]
            out.append(_node(f"node_{nid}", "FusedMatMul", ins, [n["outputs"][0]["name"]], n["module_path"],
                             source_ops=[nid, add["id"]], fused_from=[f"node_{nid}", f"node_{add['id']}"],
                             domain="com.microsoft", **base))
            groups.append({"node": f"node_{nid}", "op_type": "FusedMatMul", "pattern": "MatMul+Add → FusedMatMul",
                           "absorbed": [{"id": f"node_{nid}", "op_type": "MatMul"},
                                        {"id": f"node_{add['id']}", "op_type": "Add"}],
                           "source_ops": [nid, add["id"]], "module_path": n["module_path"]})
            continue
        if not accel and op == "Softmax" and k % 4 == 0:      # an inserted reorder: no source op
            t_out = f"{ins[0]}_nchwc"
            out.append(_node(f"reorder_{nid}", "Transpose", ins[:1], [t_out], None, kind="layout", **base))
            ins = [t_out] + ins[1:]
        if accel and op in ("LayerNormalization", "Gelu"):
            c_out = f"{ins[0]}_to_fp32"
            out.append(_node(f"cast_in_{nid}", "Cast", ins[:1], [c_out], None, kind="cast",
                             **{**base, "backend": "cpu", "precision": "fp32"}))
            out.append(_node(f"node_{nid}", op, [c_out], [f"{nid}_fp32"], n["module_path"], source_ops=[nid],
                             fused_from=[f"node_{nid}"], fallback=True,
                             fallback_reason=f"{op} is not supported by the NNAPI EP",
                             **{**base, "backend": "cpu", "precision": "fp32",
                                "kernel": "CPUExecutionProvider"}))
            out.append(_node(f"cast_out_{nid}", "Cast", [f"{nid}_fp32"], [n["outputs"][0]["name"]], None,
                             kind="cast", **base))
            continue
        out.append(_node(f"node_{nid}", op, ins, [n["outputs"][0]["name"]], n["module_path"], source_ops=[nid],
                         fused_from=[f"node_{nid}"], **base))
    # Constants (dropped by the view, present in real reports): one weight per MatMul.
    consts = [_node(f"w_{n['id']}", "Constant", [], [f"w_{n['id']}"], None, kind="constant")
              for n in out if n["op_type"] in ("MatMul", "FusedMatMul")]
    for c, n in zip(consts, [n for n in out if n["op_type"] in ("MatMul", "FusedMatMul")]):
        n["inputs"].append(_t(c["outputs"][0]["name"]))
    graph = {"name": tid, "stage": "optimized", "inputs": src["inputs"], "outputs": src["outputs"],
             "nodes": consts + out,
             "evidence": "predicted-runtime" if accel else "reported"}
    return graph, {"groups": groups, "count": len(groups), "evidence": graph["evidence"]}


def synthetic_report(n_nodes: int) -> dict:
    """A report-like dict whose target graphs have about n_nodes non-constant nodes each."""
    from xc_core.analysis.alignment import source_op_table
    from xc_core.ir import Graph
    blocks = max(1, round(n_nodes / (OPS_PER_LAYER * LAYERS_PER_BLOCK + 1)))
    src = source_graph(blocks)
    targets = {}
    graphs = {}
    for tid in ("ort-nnapi", "ort-cpu"):
        g, fus = _target_graph(src, tid)
        graphs[tid] = Graph.from_dict(g)
        targets[tid] = {"id": tid, "identity": tid, "label": tid, "status": "ok", "error": None, "graph": g,
                        "fusions": fus, "evidence": {"assignment": g["evidence"]}, "info": {}}
    rows = source_op_table(Graph.from_dict(src), graphs)
    return {"schema_version": "1.0", "created_at": "synthetic",
            "source": {"kind": "synthetic", "name": f"synthetic-{n_nodes}", "sha256": f"synthetic{n_nodes:064d}",
                       "inputs": []},
            "reference": {"id": "—"},
            "capture": {"graph": src, "op_count_before": len(src["nodes"])},
            "targets": targets,
            "alignment": {"evidence": "reported", "source_ops": rows}}


# ------------------------------------------------------------------------------------------------ in-process

NETRON_S = {1280: 1.9, 5120: 5.9, 20000: 20.7}


def _median(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def flatten(report: dict) -> dict:
    """The report as a flat ONNX upload would give it: no module paths, node names without scopes."""
    for t in report["targets"].values():
        for n in t["graph"]["nodes"]:
            n["module_path"] = None
    for r in (report.get("alignment") or {}).get("source_ops") or []:
        r["module_path"] = None
    report["source"]["name"] += "-flat"
    report["source"]["sha256"] = report["source"]["sha256"][:-4] + "flat"
    return report


def largest_group(tree, expanded: set[str]) -> str | None:
    """The biggest group drawn collapsed under these expansions (what a user opens first)."""
    from xc_core.views import topology
    v = topology.view(tree, expanded)
    groups = [b for b in v["boxes"] if b["kind"] == "group"]
    return max(groups, key=lambda b: b["nodes"])["path"] if groups else None


def run_inprocess(n_nodes: int, repeat: int, flat: bool) -> dict:
    from xc_core.views import graph_layout as layout, topology

    t0 = time.perf_counter()
    report = synthetic_report(n_nodes)
    if flat:
        report = flatten(report)
    gen_s = time.perf_counter() - t0
    targets = list(report["targets"].values())
    n_real = [sum(1 for n in t["graph"]["nodes"] if n["kind"] not in layout.DROP_KINDS) for t in targets]
    sizes = ", ".join(f"{t['id']} {k} nodes" for t, k in zip(targets, n_real))
    print(f"synthetic report: {sizes} "
          f"(built in {gen_s:.1f} s, not counted){' · flat: no module paths' if flat else ''}")

    rows = []
    floor, _ = _median(lambda: topology.render_svg(topology.view(topology.build_tree(layout.prepare(
        {"nodes": [targets[0]["graph"]["nodes"][-1]]})), set())), repeat)
    rows.append(("floor: dot on a 1-box drawing", floor, "Graphviz start-up"))
    s, preps = _median(lambda: [layout.prepare(t["graph"], t.get("fusions")) for t in targets], repeat)
    rows.append(("prepare (both targets)", s, f"{sum(len(p.ids) for p in preps)} nodes"))
    s, trees = _median(lambda: [topology.build_tree(p) for p in preps], repeat)
    rows.append(("module hierarchy (both)", s, f"synthesized: {trees[0].synthesized or 'no (module paths)'}"))
    largest = max(trees, key=lambda tr: len(tr.prep.ids))
    s, expanded = _median(lambda: topology.auto_expand(largest), repeat)
    rows.append(("auto expansion", s, f"{len(expanded)} groups open"))
    s, views = _median(lambda: [topology.view(tr, expanded) for tr in trees], repeat)
    rows.append(("views (both)", s, " / ".join(f"{v['n_boxes']} boxes" for v in views)))
    s, svgs = _median(lambda: [topology.render_svg(v) for v in views], repeat)
    rows.append(("dot → SVG (both)", s, " / ".join(f"{len(x) // 1024} KiB" for x in svgs)))
    target = largest_group(largest, expanded)
    opened = expanded | {target} if target else expanded
    s, _ = _median(lambda: [topology.render_svg(topology.view(tr, opened)) for tr in trees], repeat)
    rows.append(("expand one group (both)", s, f"{target} → " + " / ".join(
        f"{topology.view(tr, opened)['n_boxes']} boxes" for tr in trees)))

    def cold_first_drawing():
        trs = [topology.build_tree(layout.prepare(t["graph"], t.get("fusions"))) for t in targets]
        big = max(trs, key=lambda tr: len(tr.prep.ids))
        ex = topology.auto_expand(big)
        return [topology.render_svg(topology.view(tr, ex)) for tr in trs]

    s, _ = _median(cold_first_drawing, repeat)
    rows.append(("first drawing, cold (both)", s, "all of the above from the report, nothing cached"))
    w = max(len(r[0]) for r in rows)
    print(f"\nin process, median of {repeat} runs")
    print(f"{'step':<{w}}  {'median ms':>10}  {'× floor':>8}  detail")
    print("-" * (w + 40))
    for name, sec, detail in rows:
        print(f"{name:<{w}}  {sec * 1000:>10.2f}  {sec / floor:>8.1f}  {detail}")
    netron = NETRON_S.get(n_nodes)
    if netron:
        print(f"Netron, same size ({n_nodes} nodes, every node drawn): {netron:.1f} s")
    return {"rows": rows, "report": report, "group": target}


# --------------------------------------------------------------------------------------------------- browser

APP = '''
import os, sys
sys.path[:0] = [{root!r}, {bench!r}]
import streamlit as st
from pages import _ui  # noqa: F401  (app.py imports it before any page: its import cost is not the page's)
from topology_bench import synthetic_report, flatten

st.set_page_config(page_title="topology bench", layout="wide")


@st.cache_resource
def _report(n, flat):
    r = synthetic_report(n)
    return flatten(r) if flat else r


st.session_state["report"] = _report({n}, {flat})
st.session_state["_xc_routed"] = True      # this app stands in for app.py's sidebar
if st.query_params.get("warm"):
    st.write("warm")
    st.stop()
if st.query_params.get("baseline"):      # the floor: the same server, browser and pane component, 2 tiny drawings
    from pages._graph_pane import graph_pane
    st.title("Baseline")
    svg = '<svg width="60pt" height="30pt"><g id="b0" class="node"><title>x</title><text>x</text></g></svg>'
    for col, k in zip(st.columns(2), range(2)):
        with col:
            graph_pane(data={{"svg": svg, "key": f"b{{k}}", "items": {{}}, "clusters": {{}}}}, key=f"b{{k}}")
    st.stop()
st.navigation([st.Page({page!r}, title="Topology", default=True)]).run()
'''

def _panes_drawn(page, timeout_ms: int = 180_000) -> None:
    """Both panes hold an SVG with boxes (the panes live in shadow roots: Playwright's locators pierce them)."""
    page.locator(".xc-canvas svg").nth(1).locator("g.node").first.wait_for(timeout=timeout_ms)


def _node_count(page) -> int:
    return page.locator(".xc-canvas g.node").count()


def run_browser(n_nodes: int, repeat: int, flat: bool, group: str | None) -> None:
    import contextlib
    import socket
    import subprocess

    from playwright.sync_api import sync_playwright

    chromium = "/usr/bin/chromium"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update"]
    tmp = tempfile.mkdtemp(prefix="xc-topo-bench-")
    app = os.path.join(tmp, "bench_app.py")
    with open(app, "w") as f:
        f.write(APP.format(root=ROOT, bench=os.path.join(ROOT, "bench"), n=n_nodes, flat=flat,
                           page=os.path.join(ROOT, "pages", "topology.py")))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(tmp, "streamlit.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", app, "--server.headless", "true",
                             "--server.port", str(port), "--browser.gatherUsageStats", "false",
                             "--server.fileWatcherType", "none"], cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    results: dict[str, list[float]] = {"baseline render": [], "first render": [], "expand a group": []}
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.3)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=flags)
            page = browser.new_page(viewport={"width": 1600, "height": 1100})
            t0 = time.perf_counter()
            page.goto(url + "?warm=1", timeout=600_000)
            page.get_by_text("warm", exact=True).wait_for(timeout=600_000)
            print(f"\nbrowser: server up, synthetic {n_nodes}-node report built in the server "
                  f"({time.perf_counter() - t0:.1f} s, not counted below)")
            for k in range(repeat):
                page.close()
                page = browser.new_page(viewport={"width": 1600, "height": 1100})
                t0 = time.perf_counter()
                page.goto(url + "?baseline=1", timeout=600_000)
                _panes_drawn(page)
                _wait_idle(page)
                results["baseline render"].append(time.perf_counter() - t0)
                page.close()
                page = browser.new_page(viewport={"width": 1600, "height": 1100})
                t0 = time.perf_counter()
                page.goto(url, timeout=600_000)
                _panes_drawn(page)
                _wait_idle(page)
                results["first render"].append(time.perf_counter() - t0)
                if page.locator('[data-testid="stException"]').count():
                    raise RuntimeError(page.locator('[data-testid="stException"]').first.inner_text())
                before = _node_count(page)
                # Expand: click the biggest collapsed group of the first pane (its hover says so).
                box = page.locator(".xc-canvas").first.locator("g.node").filter(
                    has=page.locator("title", has_text="click to expand"))
                if not box.count():
                    print("no collapsed group to expand")
                    break
                target = box.first
                if group:
                    named = box.filter(has=page.locator("title", has_text=group + " —"))
                    target = named.first if named.count() else target
                target.scroll_into_view_if_needed()
                t0 = time.perf_counter()
                target.click()
                deadline = time.time() + 180
                while _node_count(page) == before and time.time() < deadline:
                    page.wait_for_timeout(20)
                _wait_idle(page)
                results["expand a group"].append(time.perf_counter() - t0)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nheadless Chromium ({chromium}), {n_nodes}-node synthetic report{' (flat)' if flat else ''}, 2 panes; "
          f"seconds (run 1 = cold caches; later runs: new session, caches warm); baseline = the same page "
          f"machinery with two 1-box drawings (the floor of 'panes drawn' here)\n")
    print(f"{'measure':<16}  {'run 1':>7}  {'median':>7}  all runs")
    for name, ts in results.items():
        if not ts:
            print(f"{name:<16}  {'—':>7}  {'—':>7}  not measured (see log in {tmp})")
            continue
        print(f"{name:<16}  {ts[0]:>7.2f}  {statistics.median(ts):>7.2f}  " + ", ".join(f"{t:.2f}" for t in ts))
    netron = NETRON_S.get(n_nodes)
    if netron:
        print(f"{'Netron':<16}  {netron:>7.2f}  (first render of the same size, every node drawn)")
    print(f"screenshots and server log: {tmp}")


def _wait_idle(page) -> None:
    """Until Streamlit has finished the run (no running-status widget), then two animation frames."""
    page.wait_for_timeout(50)
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=600_000,
                           polling=50)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20000, help="approximate node count of each target graph")
    ap.add_argument("--repeat", type=int, default=5, help="runs per step; the median is reported")
    ap.add_argument("--flat", action="store_true", help="no module paths: the hierarchy is synthesized")
    ap.add_argument("--browser", action="store_true", help="also time first render and expanding in Chromium")
    ap.add_argument("--browser-repeat", type=int, default=3)
    ap.add_argument("--json", help="write the in-process timings to this file")
    args = ap.parse_args(argv)
    res = run_inprocess(args.nodes, args.repeat, args.flat)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"step": n, "median_s": s, "detail": d} for n, s, d in res["rows"]], f, indent=1)
    if args.browser:
        run_browser(args.nodes, args.browser_repeat, args.flat, res["group"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
