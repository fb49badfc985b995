"""Shared dashboard plumbing: the sidebar, the report cache, and small render helpers. No compiler calls here
except through xc_core.api.analyze."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile

import streamlit as st

from pages import _inputs_panel
from xc_core.errors import XcInputError
from xc_core.sources.samples import DEFAULT_SAMPLE, SAMPLES
from xc_core.targets import REGISTRY, target_ids

UPLOAD_TYPES = ["pt2", "pt", "pth", "onnx", "mlmodel", "zip"]
EVIDENCE_HELP = {
    "measured": "ran on this host and measured",
    "reported": "the compiler / runtime reported it",
    "predicted-runtime": "the runtime's own checker predicted it",
    "predicted-rules": "xc's cited rule table predicted it",
    "emulated": "computed by emulating a runtime this host cannot run",
}


@st.cache_resource
def _report_store() -> dict:
    """Reports by content key, shared across sessions: re-opening a model already analysed is instant."""
    return {}


@st.cache_resource
def _analysis_lock():
    """One analysis at a time per server process. Streamlit sessions are threads of one process, and
    torch.export / torch.onnx.export keep process-wide state: two at once fail each other ("Trying to pop empty
    mode stack"), and the failure would be cached as the model's. Until targets run in worker processes, the
    second session waits its turn."""
    import threading
    return threading.Lock()


def sidebar_and_analyze() -> None:
    st.session_state["_xc_routed"] = True
    sb = st.sidebar
    sb.title("xc")
    sb.caption("Compile one model for every target; see what each compiler decided.")
    mode = sb.radio("Source", ["Bundled sample", "Upload"], key="source_mode", horizontal=True)
    upload = npz = None
    if mode == "Bundled sample":
        names = list(SAMPLES)
        # ?sample=NAME in the URL opens that sample (links for demos and PR comments).
        wanted = st.query_params.get("sample")
        if "sample" not in st.session_state and wanted in SAMPLES:
            st.session_state["sample"] = wanted
        if "sample" not in st.session_state:
            st.session_state["sample"] = DEFAULT_SAMPLE
        sample = sb.selectbox("Sample", names, key="sample",
                              format_func=lambda n: n, help="Defined in code with seeded weights")
        sb.caption(SAMPLES[sample].description)
    else:
        upload = sb.file_uploader("Model", type=UPLOAD_TYPES, key="upload",
                                  help=".pt2 (torch.export.save), .pt (TorchScript or a sample's state_dict), .onnx, "
                                       "or a Core ML ML program (.mlmodel / zipped .mlpackage)")
        npz = sb.file_uploader("Inputs (.npz, optional)", type=["npz"], key="upload_npz")
    available = [t for t in target_ids() if REGISTRY[t].available()[0]]
    targets = sb.multiselect("Targets", target_ids(), default=available, key="targets",
                             format_func=lambda t: f"{t} — {REGISTRY[t].label}")
    options = _target_options(sb, targets)
    if not targets:
        st.session_state["report"] = None
        st.session_state["report_error"] = "Pick at least one target in the sidebar."
        return
    if mode == "Upload" and upload is None:
        st.session_state["report"] = None
        st.session_state["report_error"] = ("Upload a model (.pt2, .pt, .onnx) in the sidebar, or switch to a "
                                            "bundled sample.")
        return

    if mode == "Bundled sample":
        source_key = f"sample:{sample}"
        spec, npz_path, data, npz_data = f"sample:{sample}", None, None, b""
    else:
        data = upload.getvalue()
        npz_data = npz.getvalue() if npz is not None else b""
        source_key = hashlib.sha256(data).hexdigest() + "|" + hashlib.sha256(npz_data).hexdigest()
        spec, npz_path = None, None
    edits = _inputs_panel.overrides(source_key)
    key = f"{source_key}|{','.join(targets)}|{sorted(options.items())}|{sorted(edits.items())}"
    store = _report_store()
    if key not in store:
        tmp = None
        try:
            if mode == "Upload":
                # The upload lives on disk only while it is analysed; the folder goes, also on error.
                tmp = tempfile.mkdtemp(prefix="xc-upload-")
                spec = os.path.join(tmp, _safe_filename(upload.name))
                with open(spec, "wb") as f:
                    f.write(data)
                if npz is not None:
                    npz_path = os.path.join(tmp, "inputs.npz")
                    with open(npz_path, "wb") as f:
                        f.write(npz_data)
            lock = _analysis_lock()
            if not lock.acquire(blocking=False):
                with st.spinner("Another session is analysing a model; this one starts when it is done…"):
                    lock.acquire()
            try:
                result = _run_analysis(spec, targets, npz_path, options, edits, source_key) \
                    if key not in store else store[key]
            finally:
                lock.release()
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        if result is not None:
            store[key] = result
        elif st.session_state.get("report_refused"):
            # A refusal is cached too: clicking through pages must not analyse a bad file again and again.
            store[key] = {"_error": st.session_state["report_error"],
                          "_needs_shapes": st.session_state.get("needs_shapes", [])}
        else:
            return  # an internal error: shown by require_report, tried again on the next run
    cached = store[key]
    report = None if "_error" in cached else cached
    if report is not None:
        if not edits:
            _inputs_panel.remember_auto(source_key, report)
        st.session_state["report"] = report
        st.session_state["report_error"] = None
        needs = []
    else:
        st.session_state["report"] = None
        st.session_state["report_error"] = cached["_error"]
        needs = cached["_needs_shapes"]
    _inputs_panel.render(sb, source_key, report, needs)


def _safe_filename(name: str) -> str:
    """The browser's file name, kept for its extension and for the report, but never a path."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(name or "upload"))[-120:].lstrip(".")
    return base or "upload"


def _target_options(sb, targets: list[str]) -> dict[str, dict]:
    """Options that differ from a target's defaults; they become part of its identity in the report."""
    from xc_core.analysis.boundaries import DEFAULT_BANDWIDTH_GB_S, DEFAULT_TRANSITION_OVERHEAD_MS
    options: dict[str, dict] = {}
    mobile = [t for t in targets if t in ("ort-nnapi", "ort-coreml")]
    if not mobile:
        return options
    with sb.expander("Target options"):
        if "ort-nnapi" in mobile:
            if st.checkbox("NNAPI: relaxed fp16 (emulated)", value=False, key="opt_nnapi_fp16",
                           help="NNAPI_FLAG_USE_FP16: the NNAPI partitions are emulated in fp16"):
                options["ort-nnapi"] = {"fp16": True}
        if "ort-coreml" in mobile:
            if not st.checkbox("CoreML EP: fp16 compute (emulated)", value=True, key="opt_coreml_fp16",
                               help="MLProgram partitions on the GPU / Neural Engine compute in fp16"):
                options["ort-coreml"] = {"fp16": False}
        bw = st.number_input("Boundary copy bandwidth (GB/s)", 0.1, 100.0, DEFAULT_BANDWIDTH_GB_S, 0.5,
                             key="opt_bandwidth")
        ov = st.number_input("Overhead per transition (ms)", 0.0, 10.0, DEFAULT_TRANSITION_OVERHEAD_MS, 0.05,
                             key="opt_overhead")
        for t in mobile:
            if bw != DEFAULT_BANDWIDTH_GB_S:
                options.setdefault(t, {})["bandwidth_gb_s"] = bw
            if ov != DEFAULT_TRANSITION_OVERHEAD_MS:
                options.setdefault(t, {})["transition_overhead_ms"] = ov
    return options


def _run_analysis(spec: str, targets: list[str], npz_path: str | None, options: dict, edits: dict,
                  source_key: str):
    from xc_core.api import analyze
    from xc_core.views import run_status
    st.session_state["needs_shapes"] = []
    st.session_state["report_refused"] = False
    with st.status(f"Compiling for {len(targets)} target(s)…", expanded=True) as status:
        bar = st.progress(0.0)

        def progress(ev):
            if ev["stage"] == "capture" and ev["status"] == "running":
                st.write("Capturing: torch.export → ONNX …")
            elif ev["stage"] == "inputs" and ev["status"] == "done":
                res = ev["resolution"]
                failed = [p for p in res.get("probes", []) if not p["ok"]]
                if failed:
                    st.write(f"Input shapes: {len(failed)} size(s) failed on the reference before one ran "
                             f"({plain(failed[0]['dims'])})")
            elif ev["stage"] == "target" and ev["status"] == "running":
                st.write(f"`{ev['target']}` compiling …")
            elif ev["stage"] == "target":
                bar.progress(min(1.0, ev["index"] / ev["total"]))
                mark = {"ok": ":green-badge[ok]", "error": ":red-badge[error]",
                        "unavailable": ":gray-badge[unavailable]"}.get(ev["status"], "")
                st.markdown(f"{mark} `{ev['target']}`" + (f": {plain(ev['error'])}" if ev.get("error") else ""))

        try:
            report = analyze(spec, targets, inputs_npz=npz_path, target_options=options, progress=progress,
                             **edits)
        except XcInputError as e:
            status.update(label="Could not analyse this input", state="error")
            st.session_state["report"] = None
            st.session_state["report_error"] = e.for_dashboard()
            st.session_state["report_refused"] = True
            if e.fix == "shapes":
                st.session_state["needs_shapes"] = e.inputs
            return None
        except Exception as e:  # noqa: BLE001 — never a traceback in the UI
            status.update(label="Analysis failed", state="error")
            st.session_state["report"] = None
            st.session_state["report_error"] = f"internal error: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            return None
        label, state = run_status(report)
        status.update(label=label, state=state, expanded=state == "error")
        return report


def pages() -> dict:
    """The page list st.navigation shows (paths relative to app.py)."""
    return {
        "Report": [
            st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
        ],
        "Compare": [
            st.Page("pages/topology.py", title="Topology", icon=":material/account_tree:"),
            st.Page("pages/heatmap.py", title="Heat map", icon=":material/grid_on:"),
            st.Page("pages/fusion.py", title="Fusion", icon=":material/merge:"),
            st.Page("pages/drift.py", title="Drift", icon=":material/show_chart:"),
            st.Page("pages/precision.py", title="Precision", icon=":material/tune:"),
            st.Page("pages/checklist.py", title="Checklist", icon=":material/checklist:"),
        ],
        "Accelerators": [
            st.Page("pages/fallbacks.py", title="Fallbacks", icon=":material/warning:"),
            st.Page("pages/coreml.py", title="Core ML", icon=":material/phone_iphone:"),
        ],
    }


def leave_legacy_pages_mode() -> None:
    """Rerun at once if this is Streamlit's legacy pages/ mode, before any widget exists.

    With a pages/ folder beside app.py, the first script run of a process uses Streamlit's legacy multipage
    mode until st.navigation has run once. In that run a request for a page (/drift?sample=...) runs the page
    file alone, without the sidebar, and widget ids are computed under another script hash than in every later
    run — so a sidebar built then is replaced by fresh widgets on the next click, and the sample the user picked
    falls back to the first in the list. Clearing the flag (what st.navigation itself does) and rerunning means
    the first widgets anyone sees are the ones that persist.
    """
    from streamlit.runtime.pages_manager import PagesManager
    if PagesManager.uses_pages_directory:
        # st.navigation clears the flag itself and sends the real page list, so the browser never shows the
        # pages/ folder listing; the rerun then builds everything under the ids every later run uses.
        st.navigation(pages())
        PagesManager.uses_pages_directory = False
        st.rerun()


def require_report() -> dict | None:
    """The page's Report, or an explanation of why there is none (then the page stops)."""
    if not st.session_state.get("_xc_routed"):
        # A page file run on its own (the legacy mode above, first request of a fresh server): through app.py.
        leave_legacy_pages_mode()
        st.rerun()
    report = st.session_state.get("report")
    if report is None:
        st.error(plain(st.session_state.get("report_error") or "No report yet."))
        st.stop()
    return report


def full_message(detail: str | None) -> None:
    """The runtime's whole message, one click away from its summary."""
    if detail and "\n" in detail.strip():
        with st.expander("Full message"):
            st.code(detail, language=None)


def plain(text: str) -> str:
    """Text from a file or a compiler, shown as is: Markdown would turn `__import__` into bold "import"."""
    return re.sub(r"([\\`*_{}\[\]()#+\-!|~<>$])", r"\\\1", text)


def evidence_badge(kind: str | None) -> str:
    if not kind:
        return ""
    colors = {"measured": "green", "reported": "blue", "predicted-runtime": "orange",
              "predicted-rules": "violet", "emulated": "gray"}
    return f":{colors.get(kind, 'gray')}-badge[{kind}]"


def header(report: dict, title: str) -> None:
    src = report["source"]
    st.title(title)
    st.caption(f"**{src['name']}** · {src['kind']} · sha256 `{src['sha256'][:12]}` · reference "
               f"`{(report.get('reference') or {}).get('id', '—')}`")
