"""Model Explorer, live: xc's adapter and overlay provider for Google's Model Explorer, and `xc explorer`.

`xc_model_explorer` (the extension package Model Explorer imports, `model-explorer --extensions=xc_model_explorer`)
is a thin shell around this module:

- the adapter "xc" opens a .pt2, .onnx or .tflite as the graph xc captured from it, or an .xcrun (a small JSON
  pointer that `xc explorer` writes: {"run": run id or folder} or {"source": "sample:NAME"}) as the captured graph
  of that run beside each compiled target's graph;
- the provider "xc overlays" colours the graph shown with one target's decisions — backend, CPU fallback (the
  node's value is the reason, as the Fallbacks page words it), precision, per-node time, layer drift — each named
  with its evidence kind as the report holds it.

What the overlays need is computed on demand and kept: a model is analysed for the picked target only when no
stored run holds that target's cell (xc_core/run_keys.py: the same keys `xc analyze`, the dashboard and `xc batch`
use, so a CLI run of that model is found, and a run made here is found by them); opening the model keeps its
capture the same way (a run of the reference alone). A target's decisions land on the captured graph through
source ops, as the export's sync mapping pairs nodes (xc_core/export/model_explorer.py `project`).

Model Explorer 0.1.34's standalone UI takes sync-navigation data only as an upload ("Upload mapping from
computer"; its visualizer-config route is for embedding apps), so `xc explorer RUN` writes the mappings beside the
run's .xcrun and says which file to upload.
"""
from __future__ import annotations

import json
import os
import shutil
import threading
from collections import OrderedDict

from .errors import XcInputError, hide_paths, printable_line

ADAPTER_ID = "xc"
PROVIDER_ID = "xc_overlays"
EXTENSION_MODULE = "xc_model_explorer"
POINTER_EXT = "xcrun"
MODEL_EXTS = ("pt2", "onnx", "tflite")
FILE_EXTS = (*MODEL_EXTS, POINTER_EXT)
# Each overlay: what a node shows, and which of the target's evidence kinds stands behind it.
OVERLAYS = {
    "backend": "backend (where each node runs)",
    "fallback": "fallback (the reason a node left the accelerator)",
    "precision": "precision (what each node computes in)",
    "time": "time (per node, µs)",
    "drift": "drift (rel L2 against the reference, per layer)",
}
TARGET_EDITOR, OVERLAY_EDITOR = "target", "overlay"
# The reference a capture-only run compiles, by model format (pipeline/steps.py picks the same one).
_REFERENCE_BY_EXT = {"pt2": "torch", "onnx": "onnx-reference", "tflite": "tflite-reference"}
MAX_POINTER_BYTES = 64 << 10
_FALLBACK_COLOR, _ON_ACCELERATOR_COLOR = "#ef5350", "#c8e6c9"
_TIME_GRADIENT = [{"stop": 0, "bgColor": "#e3f2fd"}, {"stop": 0.5, "bgColor": "#fff59d"},
                  {"stop": 1, "bgColor": "#ef5350"}]
_REPORTS_KEPT = 8       # reports held per process: the UI asks again for every overlay of the same target


def _export():
    # Imported when used: `xc` builds every subcommand's parser from this module at each start.
    from .export import model_explorer
    return model_explorer


class Unavailable(Exception):
    """An overlay that cannot be shown: str() is the one line the UI shows."""


# --- what a path names -----------------------------------------------------------------------------------------

class Opened:
    """A model file or an .xcrun pointer, as the extension sees it: the source to analyse (a path or sample:NAME;
    None for a stored run whose model is not known here) and the stored run it names, if any."""

    def __init__(self, path: str):
        self.path = path
        self.ext = _ext(path)
        self.run_ref: str | None = None
        if self.ext == POINTER_EXT:
            pointer = read_pointer(path)
            self.source, self.run_ref = pointer.get("source"), pointer.get("run")
        elif self.ext in MODEL_EXTS:
            if not os.path.isfile(path):
                raise XcInputError(f"{os.path.basename(path)}: no such file")
            self.source = path
        else:
            raise XcInputError(f"{os.path.basename(path)}: not a model xc's Model Explorer adapter opens (accepted: "
                               f"{', '.join('.' + e for e in FILE_EXTS)})")

    def run_report(self) -> dict:
        from .review.runs import load_run
        return _cached(("run", self.run_ref), lambda: load_run(self.run_ref).report)


def _ext(path: str) -> str:
    return os.path.splitext(path)[1].lower().lstrip(".")


def read_pointer(path: str) -> dict:
    """An .xcrun's {"run": ref} or {"source": spec}; bad content is one line."""
    name = os.path.basename(path)
    accepted = '(accepted: {"run": "<run id or folder>"} or {"source": "sample:NAME or a model file"})'
    try:
        size = os.path.getsize(path)
        if size <= MAX_POINTER_BYTES:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
    except OSError as e:
        raise XcInputError(f"{name}: cannot be read ({e.strerror or e})") from None
    except ValueError:
        raise XcInputError(f"{name}: not JSON {accepted}") from None
    if size > MAX_POINTER_BYTES:
        raise XcInputError(f"{name}: larger than an .xcrun pointer can be ({MAX_POINTER_BYTES >> 10} KiB)")
    pointer = {k: data[k] for k in ("run", "source")
               if isinstance(data, dict) and isinstance(data.get(k), str) and data[k]}
    if not pointer:
        raise XcInputError(f"{name}: names no run {accepted}")
    source = pointer.get("source")
    if source is not None and not (source.startswith("sample:") or _ext(source) in MODEL_EXTS):
        raise XcInputError(f"{name}: its source is neither a sample nor a model file {accepted}")
    return pointer


# --- stored runs and analyses ----------------------------------------------------------------------------------

_cache: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()
_cell_locks: dict[str, threading.Lock] = {}


def _cached(key, make):
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    value = make()
    with _cache_lock:
        _cache[key] = value
        while len(_cache) > _REPORTS_KEPT:
            _cache.popitem(last=False)
    return value


def _cells(source: str, targets: list[str]) -> dict[str, str]:
    """The cell keys (identity -> key) `xc analyze SOURCE --targets ...` computes for these targets, no other flags."""
    from .run_keys import cell_keys, request_parts
    return cell_keys(request_parts(_digest(source)), targets, None)


def _digest(source: str) -> str:
    """run_keys.source_digest, hashed once per version of the file: every overlay asks for its cell's key, and
    hashing a model of a few hundred MB again each time costs a second a click."""
    from .run_keys import source_digest
    if source.startswith("sample:"):
        return source_digest(source)
    try:
        st = os.stat(source)
    except OSError:
        return source_digest(source)        # says "no such file" in one line
    # An ONNX model's external data files count too (run_keys hashes them): their stats are part of the version.
    version = (os.path.abspath(source), st.st_size, st.st_mtime_ns, _data_stats(source))
    return _cached(("digest", version), lambda: source_digest(source))


def _data_stats(source: str) -> tuple:
    """(name, size, mtime) of the files beside an ONNX model (its external data is among them; which ones, only
    reading the model says): a scan of one folder, milliseconds for thousands of files."""
    if not source.lower().endswith(".onnx"):
        return ()
    try:
        with os.scandir(os.path.dirname(os.path.abspath(source))) as entries:
            return tuple(sorted((e.name, st.st_size, st.st_mtime_ns) for e in entries
                                if e.is_file() and (st := e.stat())))
    except OSError:
        return ()


def _stored_with_cell(store, cell_keys: list[str]) -> dict | None:
    """The newest stored run holding any of these cells (whoever made it), or None."""
    wanted = set(cell_keys)
    if not store.available:
        return None
    for row in store.runs():            # newest first
        held = set(((row.get("summary") or {}).get("cell_keys") or {}).values())
        if held & wanted:
            report = store.get(row["key"])
            if report is not None:
                return report
    return None


def report_for(source: str, target: str) -> dict:
    """A report holding `target`'s result for `source`: a stored run's when one holds that cell, else a new
    analysis of that target alone, recorded in the store under the CLI's keys."""
    from .store import RunStore
    cells = _cells(source, [target])
    (cell,) = cells.values()

    def find_or_run() -> dict:
        with _cell_locks.setdefault(cell, threading.Lock()):    # two overlays of one target: one analysis
            store = RunStore()
            report = _stored_with_cell(store, [cell])
            return report if report is not None else _analyze_and_record(source, target, cells, store)
    return _cached(("cell", cell), find_or_run)


def captured_report(source: str) -> dict:
    """A report holding `source`'s captured graph: any stored run of this source under the same keys (every target's
    cell is a capture of it), else a run of the reference alone, recorded."""
    from .store import RunStore
    from .targets import target_ids
    reference = _REFERENCE_BY_EXT.get(_ext(source), "torch")
    reference_cells = _cells(source, [reference])

    def find_or_run() -> dict:
        store = RunStore()
        every = list(reference_cells.values()) + list(_cells(source, target_ids()).values())
        report = _stored_with_cell(store, every)
        return report if report is not None else _analyze_and_record(source, reference, reference_cells, store)
    return _cached(("capture", *reference_cells.values()), find_or_run)


def _analyze_and_record(source: str, target: str, cells: dict[str, str], store) -> dict:
    from .api import analyze
    from .paths import scratch_dir
    from .report.sidecar import write as write_report
    from .run_keys import run_key_of
    from .store import say_once
    from .worker import WorkerLimits
    key = run_key_of(cells, WorkerLimits.from_env())
    out = scratch_dir("explorer")
    try:
        report = analyze(source, [target], out_dir=out)
        report.setdefault("run", {})["key"] = key
        report["run"]["cell_keys"] = cells      # found again by cell, here and by `xc analyze --reuse`, `xc batch`
        write_report(report, out)
        try:
            store.put(key, report, out, origin="explorer")
        except OSError as e:
            say_once(f"warning: the run was not recorded in the store ({printable_line(e)})")
        return report
    finally:
        shutil.rmtree(out, ignore_errors=True)


# --- the adapter -----------------------------------------------------------------------------------------------

def convert(model_path: str) -> dict:
    """{"graphs": [graph]} (a model: its captured graph) or {"graphCollections": [...]} (an .xcrun: the captured
    graph's collection, then the compiled targets'), as dicts in `graph_builder`'s shape."""
    me = _export()
    opened = Opened(model_path)
    if opened.run_ref is None:
        report = captured_report(opened.source)
        if me.CAPTURED not in me.graph_ids(report):
            raise XcInputError(f"{os.path.basename(model_path)}: xc captured no graph from it")
        return {"graphs": [me.graph_document(report, me.CAPTURED)]}
    report = opened.run_report()
    gids = me.graph_ids(report)
    if not gids:
        raise XcInputError(f"run {printable_line(opened.run_ref)}: holds no graph to show")
    label = (report.get("source") or {}).get("name") or os.path.basename(model_path)
    # Model Explorer 0.1.34 opens the first graph of the first collection, and its graph selector orders a
    # collection's graphs by node count whatever graphSorting says: the captured graph gets a collection of its own,
    # first, so a run opens on it; the compiled targets follow, named in order.
    captured = [g for g in gids if g == me.CAPTURED]
    targets = [g for g in gids if g != me.CAPTURED]
    return {"graphCollections": [{"label": f"{label} · {name}", "graphs": [me.graph_document(report, g) for g in ids],
                                  "graphSorting": "name_asc"}
                                 for name, ids in (("captured", captured), ("compiled", targets)) if ids]}


# --- the overlay provider --------------------------------------------------------------------------------------

def target_choices() -> list[tuple[str, str]]:
    """(target id, label) for every registered target; those that cannot run here say why."""
    from .targets import REGISTRY, target_ids
    out = []
    for tid in target_ids():
        ok, why = REGISTRY[tid].available()
        out.append((tid, tid if ok else f"{tid} — not runnable here: {printable_line(why)[:80]}"))
    return out


def config_editors() -> list[dict]:
    """The dialog's drop-downs: the target, the overlay (`config_editor.DropDownConfigEditor` fields)."""
    from .targets import default_target_ids
    targets = target_choices()
    runnable = [t for t, label in targets if label == t]
    default = next((t for t in default_target_ids() if t in runnable), targets[0][0])
    return [
        {"type": "drop_down", "id": TARGET_EDITOR, "label": "Target",
         "description": "computed on demand (an analysis of this target alone) unless a stored run holds it",
         "help": "", "required": True, "defaultValue": default,
         "options": [{"value": t, "label": label} for t, label in targets]},
        {"type": "drop_down", "id": OVERLAY_EDITOR, "label": "Overlay",
         "description": "each overlay is named with its evidence kind (measured, predicted, emulated …)",
         "help": "", "required": True, "defaultValue": "backend",
         "options": [{"value": k, "label": text} for k, text in OVERLAYS.items()]},
    ]


def overlay(model_path: str, graph_id: str, config_values: dict) -> dict:
    """The GraphNodeData (a dict in `node_data_builder`'s shape) of the overlay picked in `config_values`, for the
    graph `graph_id` of `model_path`. Raises Unavailable (or XcInputError) with the one line to show."""
    me = _export()
    from .targets import REGISTRY, target_ids
    tid = str(config_values.get(TARGET_EDITOR) or "")
    kind = str(config_values.get(OVERLAY_EDITOR) or "")
    if tid not in target_ids():
        raise Unavailable(f"unknown target '{printable_line(tid)[:60]}' (accepted: {', '.join(target_ids())})")
    if kind not in OVERLAYS:
        raise Unavailable(f"unknown overlay '{printable_line(kind)[:60]}' (accepted: {', '.join(OVERLAYS)})")
    ok, why = REGISTRY[tid].available()
    if not ok:
        raise Unavailable(f"{tid} cannot run here: {printable_line(why)}")
    report = _report_with_target(Opened(model_path), tid)
    t = report["targets"][tid]
    if t.get("status") != "ok":
        said = printable_line(hide_paths(str(t.get("error") or t.get("status"))))
        raise Unavailable(f"{tid} {t.get('status')}: {said[:300]}")
    if graph_id not in me.graph_ids(report):
        raise Unavailable(f"graph {printable_line(graph_id)[:60]} is not in the run that holds {tid}; pick the "
                          f"captured graph or {tid}'s own")
    return _overlay_data(report, graph_id, tid, kind)


def _report_with_target(opened: Opened, tid: str) -> dict:
    if opened.run_ref is not None:
        report = opened.run_report()
        if tid in (report.get("targets") or {}):
            return report
        source = opened.source or _sample_of(report)
        if source is None:
            raise Unavailable(f"run {printable_line(opened.run_ref)} has no {tid} and its model file is not known here; open the "
                              f"model itself (xc explorer MODEL) to compute {tid}")
        return report_for(source, tid)
    return report_for(opened.source, tid)


def _sample_of(report: dict) -> str | None:
    source = report.get("source") or {}
    return f"sample:{source['name']}" if source.get("kind") == "sample" and source.get("name") else None


def _overlay_data(report: dict, gid: str, tid: str, kind: str) -> dict:
    me = _export()
    from .report.types import Report
    from .views.fallbacks import accelerated_targets, fallback_rows
    typed = Report.of(report)
    t = typed.targets[tid]
    nodes = [n for n in t.graph.nodes if n is not None]
    evidence = t.evidence or {}
    if kind in ("backend", "precision"):
        said = evidence.get("assignment" if kind == "backend" else "precision") or t.graph.evidence or "unknown"
        values = {}
        for n in nodes:
            value = str(getattr(n, kind) or "none")
            values[n.id] = {"value": value, "bgColor": me.category_color(kind, value)}
        return me.graph_node_data(f"{tid} {kind} ({said})", me.project(typed, gid, tid, values),
                                         categorical=True)
    if kind == "fallback":
        if tid not in accelerated_targets(typed):
            raise Unavailable(f"{tid} has no accelerator to fall back from (every node runs where it was compiled "
                              "for); pick the backend overlay")
        # The reasons as the Fallbacks page lists them (views/fallbacks.py), node by node.
        reasons = {row["node"]: row["reason"] for row in fallback_rows(typed, tid)}
        values = {}
        for n in nodes:
            if n.id in reasons:
                values[n.id] = {"value": reasons[n.id], "bgColor": _FALLBACK_COLOR}
            elif n.backend:
                values[n.id] = {"value": f"on {n.backend}", "bgColor": _ON_ACCELERATOR_COLOR
                                if n.backend != "cpu" else me.category_color("backend", "cpu")}
        said = evidence.get("assignment") or t.graph.evidence or "unknown"
        return me.graph_node_data(f"{tid} fallback ({said})", me.project(typed, gid, tid, values),
                                         categorical=True)
    if kind == "time":
        timed = {n.id: {"value": float(n.time_us)} for n in nodes if n.time_us is not None}
        if not timed:
            raise Unavailable(f"{tid} has no per-node time in this run (its runtime was not profiled here)")
        said = t.node_times.evidence or evidence.get("time") or "unknown"
        data = me.graph_node_data(f"{tid} time µs ({said})", me.project(typed, gid, tid, timed))
        data["gradient"] = _TIME_GRADIENT
        return data
    said = t.layer_drift.evidence or evidence.get("numerics") or "unknown"
    data = me.drift_node_data(typed, gid, tid, name=f"{tid} drift rel L2 ({said})")
    if data is None:
        raise Unavailable(f"{tid} has no verified per-layer drift point in this run")
    return data


# --- sync navigation ---------------------------------------------------------------------------------------------

def write_sync_files(report: dict, folder: str) -> list[tuple[str, str, str]]:
    """A sync-navigation mapping between the captured graph and each compiled target's (files in `folder`, named
    <captured>.vs.<target>.sync.json); (left, right, path) per file."""
    me = _export()
    gids = me.graph_ids(report)
    if me.CAPTURED not in gids:
        return []
    os.makedirs(folder, exist_ok=True)
    stems = me.file_stems(gids)
    out = []
    for gid in gids:
        if gid == me.CAPTURED:
            continue
        path = os.path.join(folder, f"{stems[me.CAPTURED]}.vs.{stems[gid]}.sync.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(me.sync_document(me.sync_entries(report, me.CAPTURED, gid)), f,
                      ensure_ascii=False, allow_nan=False)
        out.append((me.CAPTURED, gid, path))
    return out


# --- `xc explorer` -----------------------------------------------------------------------------------------------

def add_parser(sub) -> None:
    p = sub.add_parser(
        "explorer", help="open a model or a stored run in Google's Model Explorer with xc's live overlays",
        description="Start Model Explorer on 127.0.0.1 with xc's extension (xc_model_explorer): a .pt2, .onnx or "
                    ".tflite opens as the graph xc captured, a run (id, folder or report.json) as its captured and "
                    "compiled graphs; the 'xc overlays' provider shows any target's backend, fallback reasons, "
                    "precision, per-node time or layer drift on it, analysing that target on demand.")
    p.add_argument("model", nargs="?", metavar="MODEL | RUN",
                   help="a .pt2, .onnx, .tflite or .xcrun file, sample:NAME, or a run id / run folder / report.json")
    p.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--no-open", action="store_true", help="do not open a browser tab")


def pointer_dir() -> str:
    from .paths import home
    return os.path.join(home(), "explorer")


def resolve(ref: str) -> tuple[str, list[tuple[str, str, str]]]:
    """What `xc explorer REF` opens: (the path Model Explorer loads, sync-mapping files written for it)."""
    me = _export()
    if ref.startswith("sample:"):
        from .sources.samples import SAMPLES
        name = ref.split(":", 1)[1]
        if name not in SAMPLES:
            raise XcInputError(f"{printable_line(ref)}: no such sample (accepted: "
                               f"{', '.join('sample:' + s for s in SAMPLES)})")
        return _write_pointer(f"sample-{name}", {"source": ref}), []
    if os.path.isfile(ref) and _ext(ref) in FILE_EXTS:
        if _ext(ref) == POINTER_EXT:
            read_pointer(ref)
        return os.path.abspath(ref), []
    if os.path.isfile(ref) and not ref.endswith(".json"):
        raise XcInputError(f"{os.path.basename(ref)}: not a model xc explorer opens (accepted: "
                           f"{', '.join('.' + e for e in FILE_EXTS)}, sample:NAME, or a run id, folder or "
                           "report.json)")
    from .review.runs import load_run
    run = load_run(ref)
    if not me.graph_ids(run.report):
        raise XcInputError(f"{printable_line(ref)}: the run holds no graph to show")
    stem = run.key[:12] if run.key else me.file_stems([os.path.abspath(ref)])[os.path.abspath(ref)][-40:]
    pointer = {"run": run.key or os.path.abspath(ref)}
    sample = _sample_of(run.report)
    if sample:
        pointer["source"] = sample
    path = _write_pointer(stem, pointer)
    return path, write_sync_files(run.report, os.path.splitext(path)[0] + ".sync")


def _write_pointer(stem: str, pointer: dict) -> str:
    from .paths import write_json_atomic
    folder = pointer_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{stem}.{POINTER_EXT}")
    write_json_atomic(path, pointer)
    return path


def free_port() -> int:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_taken(port: int) -> bool:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def run(args) -> int:
    path, syncs = resolve(args.model) if args.model else (None, [])
    if args.port is not None and not 0 < args.port < 65536:
        raise XcInputError(f"--port {args.port}: not a port (accepted: 1-65535)")
    if args.port is not None and _port_taken(args.port):
        raise XcInputError(f"--port {args.port}: already in use on 127.0.0.1; pick another or leave --port out")
    port = args.port or free_port()
    server, config = _model_explorer_server()
    if path:
        config.add_model_from_path(path, adapterId=ADAPTER_ID)
    print(f"xc explorer: Model Explorer with xc's extension on http://127.0.0.1:{port}"
          + (f", opening {printable_line(os.path.basename(path))}" if path else "")
          + "; 'xc overlays' (top bar) computes a target's overlays on demand")
    for left, right, sync in syncs:
        print(f"sync navigation {left} | {right}: open {right} in the split pane, then Sync > 'Upload mapping from "
              f"computer' > {printable_line(sync)}")
    import signal
    previous = signal.signal(signal.SIGTERM, _interrupt)    # `kill` stops the server as Ctrl-C does
    try:
        server.start(host="127.0.0.1", port=port, config=config, extensions=[EXTENSION_MODULE],
                     no_open_in_browser=args.no_open)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _model_explorer_server():
    """Model Explorer's server module and a config, made safe to run offline and on loopback only."""
    import model_explorer
    from model_explorer import server
    # At start (a thread the process waits for on exit) and on the UI's request, Model Explorer asks PyPI and
    # GitHub for a newer release with no timeout: offline, or behind a firewall that drops packets, that thread
    # never ends and Ctrl-C would not stop the process. Nothing here needs it, so it answers "none" at once.
    server._check_new_version = lambda print_msg=True: {"version": "", "runningVersion": model_explorer.__version__,
                                                        "releaseUrl": "", "desktopAppUrl": ""}
    # Its start-up health check GETs the server through `requests`, which would send it to an HTTP(S)_PROXY.
    for var in ("NO_PROXY", "no_proxy"):
        listed = [x for x in os.environ.get(var, "").split(",") if x]
        os.environ[var] = ",".join(dict.fromkeys([*listed, "127.0.0.1", "localhost"]))
    return server, model_explorer.config()


__all__ = ["convert", "config_editors", "overlay", "Unavailable", "run", "add_parser", "resolve", "report_for",
           "captured_report", "write_sync_files", "OVERLAYS", "ADAPTER_ID", "PROVIDER_ID", "FILE_EXTS"]
