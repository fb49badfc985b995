"""Topology view benchmark: how long the Topology page's pieces take on a large synthetic graph.

    python bench/topology_bench.py --nodes 20000            # layout / figure timings (median of --repeat runs)
    python bench/topology_bench.py --nodes 20000 --browser  # + first render and one interaction in headless Chromium
    python bench/topology_bench.py --nodes 20000 --full     # + Sugiyama of every node, uncollapsed (slow; once)

The synthetic report looks like a transformer export: a chain of blocks `blocks.i`, each of `layer.j` with
`attn` / `mlp` sub-modules (norm → q/k/v branches → softmax → projection → residual add; norm → MLP → residual
add), plus residual adds at block level. Two targets are derived from it the way compilers differ: `ort-cpu` fuses
MatMul+Add and inserts transposes; `ort-nnapi` runs fp16 on NNAPI, falls LayerNorm/Gelu back to the CPU with casts
around them, and drops some reshapes. The alignment is computed by xc's own `source_op_table`.

All in-process timings run side by side in one process: each step is timed `--repeat` times with
time.perf_counter and the median is printed, with its ratio to the floor (building the igraph.Graph of all nodes).
"""
from __future__ import annotations

import argparse
import json
import os
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

def _median(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def run_inprocess(n_nodes: int, repeat: int, full: bool) -> dict:
    import igraph

    from xc_core import layout as topo

    t0 = time.perf_counter()
    report = synthetic_report(n_nodes)
    gen_s = time.perf_counter() - t0
    tid = "ort-nnapi"
    target = report["targets"][tid]
    others = list(report["targets"])
    kept = sum(1 for n in target["graph"]["nodes"] if n["kind"] not in topo.DROP_KINDS)
    print(f"synthetic report: {len(report['capture']['graph']['nodes'])} source ops; target {tid}: "
          f"{len(target['graph']['nodes'])} nodes ({kept} drawn, constants dropped); "
          f"ort-cpu: {len(report['targets']['ort-cpu']['graph']['nodes'])} nodes; generated in {gen_s:.2f} s")

    rows = []
    prep = topo.prepare(target["graph"], target.get("fusions"))
    floor, _ = _median(lambda: igraph.Graph(n=len(prep.ids), edges=prep.edges, directed=True), repeat)
    rows.append(("floor: igraph.Graph of all nodes (build only)", floor, f"{len(prep.ids)} v, {len(prep.edges)} e"))
    s, prep = _median(lambda: topo.prepare(target["graph"], target.get("fusions")), repeat)
    rows.append(("prepare(): kept nodes, edges, module paths", s, ""))
    s, aidx = _median(lambda: topo.index_alignment(report["alignment"]["source_ops"]), repeat)
    rows.append(("index_alignment()", s, f"{len(aidx['rows'])} source ops"))
    preps = [topo.prepare(t["graph"], t.get("fusions")) for t in report["targets"].values()]
    def cold_auto():
        for pp in preps:
            pp._memo.clear()        # the page memoises box counts per depth; time the first (cold) call
        return topo.auto_depth(preps)
    s, depth = _median(cold_auto, repeat)
    rows.append(("auto_depth() over both targets (cold)", s, f"depth {depth}"))
    s, lay = _median(lambda: topo.layout(prep, depth), repeat)
    rows.append((f"Sugiyama layout, collapsed (depth {depth})", s,
                 f"{lay['n_boxes']} boxes, {len(lay['edges'])} edges, {lay['n_layers']} layers"))
    modules = topo.collapsed_modules(prep, depth)
    expand = sorted(modules, key=lambda mk: (-mk[1], mk[0]))[len(modules) // 2][0] if modules else None
    s, lay_x = _median(lambda: topo.layout(prep, depth, expand), repeat)
    rows.append((f"Sugiyama layout, {expand} expanded", s,
                 f"{lay_x['n_boxes']} boxes, {len(lay_x['edges'])} edges"))
    s, gaps = _median(lambda: topo.counterpart_gaps(prep, tid, aidx, others), repeat)
    rows.append(("counterpart_gaps()", s, f"{len(gaps)} nodes without counterpart"))
    sel_op = next(iter(aidx["rows"]))
    selected = topo.nodes_for_source_ops(aidx, tid, [sel_op])
    s, fig = _median(lambda: topo.figure(lay, gaps=gaps, selected=selected), repeat)
    rows.append(("plotly figure, collapsed", s, ""))
    s, js = _median(lambda: fig.to_json(), repeat)
    rows.append(("figure JSON serialisation, collapsed", s, f"{len(js) / 1024:.0f} KiB"))
    s, fig_x = _median(lambda: topo.figure(lay_x, gaps=gaps, selected=selected), repeat)
    rows.append(("plotly figure, expanded", s, ""))
    s, js_x = _median(lambda: fig_x.to_json(), repeat)
    rows.append(("figure JSON serialisation, expanded", s, f"{len(js_x) / 1024:.0f} KiB"))
    if full:
        s, lay_f = _median(lambda: topo.layout(prep, None), 1)
        rows.append(("Sugiyama layout, every node (once)", s,
                     f"{lay_f['n_boxes']} boxes, {lay_f['n_layers']} layers"))
        s, fig_f = _median(lambda: topo.figure(lay_f, gaps=gaps, selected=selected), 1)
        rows.append(("plotly figure, every node (once)", s, ""))
        s, js_f = _median(lambda: fig_f.to_json(), 1)
        rows.append(("figure JSON, every node (once)", s, f"{len(js_f) / 1024 / 1024:.1f} MiB"))

    w = max(len(r[0]) for r in rows)
    print(f"\nmedian of {repeat} runs (single-run rows say 'once'); ratio = median / floor\n")
    print(f"{'step':<{w}}  {'median ms':>10}  {'× floor':>8}  detail")
    print("-" * (w + 40))
    for name, sec, detail in rows:
        print(f"{name:<{w}}  {sec * 1000:>10.2f}  {sec / floor:>8.1f}  {detail}")
    return {"rows": rows, "report": report}


# --------------------------------------------------------------------------------------------------- browser

APP = '''
import os, sys
sys.path[:0] = [{root!r}, {bench!r}]
import streamlit as st
from pages import _ui  # noqa: F401  (app.py imports it before any page: its import cost is not the page's)
from topology_bench import synthetic_report

st.set_page_config(page_title="topology bench", layout="wide")


@st.cache_resource
def _report(n):
    return synthetic_report(n)


st.session_state["report"] = _report({n})
if st.query_params.get("warm"):
    st.write("warm")
    st.stop()
if st.query_params.get("baseline"):      # the floor: the same server and browser, two tiny plotly charts
    import plotly.graph_objects as go
    st.title("Baseline")
    for col, k in zip(st.columns(2), range(2)):
        col.plotly_chart(go.Figure(go.Scatter(x=[0, 1, 2], y=[0, 2, 1])), key=f"b{{k}}", on_select="rerun",
                         selection_mode="points")
    st.stop()
st.navigation([st.Page({page!r}, title="Topology", default=True)]).run()
'''


def run_browser(n_nodes: int, repeat: int, report: dict) -> None:
    import contextlib
    import socket
    import subprocess

    from playwright.sync_api import sync_playwright

    # The op picked with the keyboard-free fallback: the first MatMul of blocks.1 (or of the only block).
    src = report["capture"]["graph"]["nodes"]
    pick = next((n for n in src if n["op_type"] == "MatMul" and (n["module_path"] or "").startswith("blocks.1.")),
                next(n for n in src if n["op_type"] == "MatMul"))
    pick_op, pick_module = pick["id"], pick["module_path"]
    # The depth picked in the depth-change interaction: one deeper than the default (new layouts).
    from xc_core import layout as topo
    preps = [topo.prepare(t["graph"], t.get("fusions")) for t in report["targets"].values()]
    auto = topo.auto_depth(preps) or 1
    new_depth = auto + 1 if auto + 1 <= max(p.max_depth for p in preps) else max(1, auto - 1)
    chromium = "/usr/bin/chromium"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update"]
    tmp = tempfile.mkdtemp(prefix="xc-topo-bench-")
    app = os.path.join(tmp, "bench_app.py")
    with open(app, "w") as f:
        f.write(APP.format(root=ROOT, bench=os.path.join(ROOT, "bench"), n=n_nodes,
                           page=os.path.join(ROOT, "pages", "topology.py")))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(os.path.join(tmp, "streamlit.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", app, "--server.headless", "true",
                             "--server.port", str(port), "--browser.gatherUsageStats", "false",
                             "--server.fileWatcherType", "none"], cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    results: dict[str, list[float]] = {"baseline render": [], "first render": [], "depth change": [],
                                       "source op pick": [], "node click": []}
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
                # Each repeat is a fresh browser tab (new session). The layout cache (st.cache_resource) is
                # shared across sessions, so only the first repeat computes layouts: it is the cold number.
                page.close()
                page = browser.new_page(viewport={"width": 1600, "height": 1100})
                t0 = time.perf_counter()
                page.goto(url + "?baseline=1", timeout=600_000)
                page.wait_for_function("document.querySelectorAll('.js-plotly-plot .scatterlayer').length >= 2",
                                       timeout=600_000, polling=50)
                _wait_idle(page)
                results["baseline render"].append(time.perf_counter() - t0)
                page.close()
                page = browser.new_page(viewport={"width": 1600, "height": 1100})
                t0 = time.perf_counter()
                page.goto(url, timeout=600_000)
                page.wait_for_function("document.querySelectorAll('.js-plotly-plot .scatterlayer').length >= 2",
                                       timeout=600_000, polling=50)
                _wait_idle(page)
                results["first render"].append(time.perf_counter() - t0)
                if page.locator('[data-testid="stException"]').count():
                    raise RuntimeError(page.locator('[data-testid="stException"]').first.inner_text())

                # Interaction: change the module depth (new layouts on the first repeat, cached after).
                t0 = time.perf_counter()
                _pick(page, "Module depth", rf"^depth {new_depth} ")
                page.wait_for_function(f"document.body.innerText.includes('(module depth {new_depth})')",
                                       timeout=600_000, polling=50)
                _wait_idle(page)
                results["depth change"].append(time.perf_counter() - t0)

                # Interaction: pick a source op with the keyboard-free fallback (highlights on both panes):
                # its module first (large graphs), then the op.
                t0 = time.perf_counter()
                _pick(page, "Source op module", None, typed=pick_module)
                _wait_idle(page)
                _pick(page, "Source op", None, typed=pick_op)
                page.get_by_text("Selected source op across targets").wait_for(timeout=600_000)
                page.wait_for_function("document.querySelector('[data-testid=\"stDataFrame\"]')", timeout=600_000,
                                       polling=50)
                _wait_idle(page)
                results["source op pick"].append(time.perf_counter() - t0)

                # Interaction: click a node in the first pane (plotly click → selection → on_select callback →
                # counterparts ringed on the other pane and the table below). Hover first, as a user does.
                try:
                    pts = page.locator(".js-plotly-plot").first.locator(".scatterlayer .trace .points path")
                    pt = pts.nth(min(5, pts.count() - 1))
                    pt.scroll_into_view_if_needed()
                    page.wait_for_timeout(300)
                    bb = pt.bounding_box()
                    x, y = bb["x"] + bb["width"] / 2, bb["y"] + bb["height"] / 2
                    page.mouse.move(x, y)
                    page.wait_for_timeout(300)
                    t0 = time.perf_counter()
                    page.mouse.click(x, y)
                    page.wait_for_function("document.body.innerText.includes('From ') || "
                                           "document.body.innerText.includes('carries no source op')",
                                           timeout=120_000, polling=50)
                    _wait_idle(page)
                    results["node click"].append(time.perf_counter() - t0)
                except Exception as e:  # noqa: BLE001 — report, keep the other numbers
                    print(f"node click not measured: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                page.screenshot(path=os.path.join(tmp, f"topology_{k}.png"), full_page=False)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    print(f"\nheadless Chromium ({chromium}), {n_nodes}-node synthetic report, 2 panes; seconds "
          f"(run 1 = cold layout caches; later runs: new session, caches warm)")
    print(f"baseline = a page with two 3-point plotly charts (the floor of 'chart visible' here); depth change = "
          f"auto (depth {auto}) → depth {new_depth}; source op pick = module then op ({pick_module} / {pick_op});"
          f" node click = click → table and rings updated\n")
    print(f"{'measure':<16}  {'run 1':>7}  {'median':>7}  all runs")
    for name, ts in results.items():
        if not ts:
            print(f"{name:<16}  {'—':>7}  {'—':>7}  not measured (see log in {tmp})")
            continue
        print(f"{name:<16}  {ts[0]:>7.2f}  {statistics.median(ts):>7.2f}  " + ", ".join(f"{t:.2f}" for t in ts))
    print(f"screenshots and server log: {tmp}")


def _wait_idle(page) -> None:
    """Until Streamlit has finished the run (no running-status widget), then two animation frames."""
    page.wait_for_timeout(50)
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=600_000,
                           polling=50)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def _pick(page, label: str, option_regex: str | None, typed: str | None = None) -> None:
    """Open the selectbox with exactly this label; type to filter (or not) and click the matching option."""
    import re
    box = page.locator('[data-testid="stSelectbox"]').filter(
        has=page.locator('[data-testid="stWidgetLabel"]').get_by_text(label, exact=True)).first
    box.locator("input").first.click()
    if typed:
        page.keyboard.type(typed)
        option_regex = "^" + re.escape(typed) + "( |$)"
    page.get_by_role("option", name=re.compile(option_regex)).first.click()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=20000, help="approximate node count of each target graph")
    ap.add_argument("--repeat", type=int, default=5, help="runs per step; the median is reported")
    ap.add_argument("--full", action="store_true", help="also lay out every node, uncollapsed (once)")
    ap.add_argument("--browser", action="store_true", help="also time first render and interactions in Chromium")
    ap.add_argument("--browser-repeat", type=int, default=3)
    ap.add_argument("--json", help="write the in-process timings to this file")
    args = ap.parse_args(argv)
    res = run_inprocess(args.nodes, args.repeat, args.full)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"step": n, "median_s": s, "detail": d} for n, s, d in res["rows"]], f, indent=1)
    if args.browser:
        run_browser(args.nodes, args.browser_repeat, res["report"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
