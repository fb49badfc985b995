"""Shared dashboard plumbing: the sidebar, the report cache, and small render helpers. No compiler calls here
except through xc_core.api.analyze."""
from __future__ import annotations

import hashlib
import re

import streamlit as st

from pages import _auth, _inputs_panel
from pages._markup import code, evidence_badge, plain  # noqa: F401 — the pages read them as _ui.plain …
from xc_core.service import DONE, FAILED
from xc_core.sources.formats import upload_extensions
from xc_core.run_keys import run_key_of
from xc_core.targets import REGISTRY, base_id, default_target_ids, target_ids
from xc_core.evidence import HELP as EVIDENCE_HELP  # noqa: F401 — the pages read it as _ui.EVIDENCE_HELP
from xc_core.views.progress import progress_lines
from xc_core.views.typed_report import Report, as_report

# Model files, and the names exporters give an ONNX model's external data: the source-format table's.
UPLOAD_TYPES = upload_extensions()
SAVED_RUN = "Saved run"


def _service():
    """One per server process: analyses run in the background, once per key for every session (and for the
    server's start-up hook), and finished reports come from the run store ($XC_HOME), so they survive a restart."""
    from xc_core.service import shared_service
    return shared_service()


def default_targets() -> list[str]:
    """The targets a new session starts with: those of xc's default set (every target but the deprecated ones)
    this host can run, or, where the deployment sets XC_DEFAULT_TARGETS (comma-separated target ids, a deprecated
    one too), those of them this host can run. An id it does not know is left out with one line in the server
    log."""
    import os
    import sys
    wanted = [t.strip() for t in os.environ.get("XC_DEFAULT_TARGETS", "").split(",") if t.strip()]
    unknown = [t for t in wanted if t not in REGISTRY]
    if unknown:
        print(f"xc: XC_DEFAULT_TARGETS names unknown target(s) {', '.join(unknown)}; accepted: "
              f"{', '.join(target_ids())}", file=sys.stderr)
    chosen = [t for t in wanted if t in REGISTRY] or default_target_ids()
    return [t for t in chosen if REGISTRY[t].available()[0]]


def target_option_label(identity: str) -> str:
    """A target or variant as the sidebar lists it: its id, its label, and why it is out of the default set."""
    cls = REGISTRY[base_id(identity)]
    return f"{identity} — {cls.label}" + (f" ({cls.deprecated})" if cls.deprecated else "")


def request_key(source_key: str, targets: list[str], options: dict, edits: dict, limits) -> str:
    """The run key of what the sidebar asks for; the server's start-up hook computes it here too, so that the
    analysis it starts is the one a new session names. `source_key` is `sample:NAME`, or an upload's digest and its
    inputs file's sha256 joined by '|'. The recipe is the CLI's and `xc batch`'s (xc_core/run_keys.py): a run of
    the same file, inputs, targets and limits made there opens here without analysing again."""
    from xc_core.run_keys import cell_keys, request_parts, source_digest
    if source_key.startswith("sample:"):
        source_sha, inputs_sha = source_digest(source_key), None
    else:
        source_sha, _, inputs_sha = source_key.partition("|")
        inputs_sha = None if inputs_sha in ("", _NO_INPUTS_FILE) else inputs_sha
    parts = request_parts(source_sha, inputs_sha, **{k: edits.get(k) for k in ("shapes", "dims", "values", "ranges")})
    return run_key_of(cell_keys(parts, targets, options), limits)


_NO_INPUTS_FILE = hashlib.sha256(b"").hexdigest()     # the digest an upload without an inputs file is keyed by


def session_limits(timeout_s: float, memory_gib: float):
    from xc_core.worker import WorkerLimits
    return WorkerLimits(float(timeout_s), float(memory_gib))


def warm_start() -> str | None:
    """At server start, before the first visitor: import what a session's first run needs (the target list asks
    the toolchains whether they are installed; the Overview's modules), so that run shows the sidebar and the
    progress panel at once; and start the default sample's analysis with the default targets, under the key a new
    session computes, so the first visitor joins it rather than starting it (not with XC_WARM_START=0). Returns
    the analysis's key, or None."""
    from xc_core.service import warm_start_enabled
    from xc_core.sources.samples import DEFAULT_SAMPLE
    import pandas  # noqa: F401
    import xc_core.api  # noqa: F401
    import xc_core.views.rows  # noqa: F401
    from pages import _capture_preview  # noqa: F401
    from xc_core.analysis import advice  # noqa: F401
    from xc_core.worker import WorkerLimits
    targets = default_targets()
    if not warm_start_enabled():
        return None
    base = WorkerLimits.from_env()
    limits = session_limits(base.timeout_s, base.memory_gib)
    key = request_key(f"sample:{DEFAULT_SAMPLE}", targets, {}, {}, limits)
    svc = _service()
    if svc.get(key) is None:
        svc.submit(key, f"sample:{DEFAULT_SAMPLE}", None, targets=targets, target_options={}, worker_limits=limits)
    return key


KEPT_WIDGET_PREFIX = "_xc_widget_"


def kept_widget(key: str, default) -> dict:
    """The keyword arguments that draw a sidebar widget over a value the app keeps in session state under `key`.

    What is analysed must change only when the user changes it. Streamlit sends the browser a widget's value only in
    the run that set it through session state, and keeps a widget's state only while the widget is drawn; a run cut
    short by a page click (the Overview still drawing) after the value was set but before the widget reached the
    browser, or a page switch that drops the state, leaves the browser to re-create the widget at its default index
    (the first sample) under the server's description, and send that back on the next click as if the user had
    picked it. So the value lives under `key`, which only the app and this widget's change callback write (pages and
    links too: `st.session_state["sample"]`), and every run hands it to the widget: the browser is told the value
    each time and never falls back to a default."""
    if key not in st.session_state:
        st.session_state[key] = default
    widget_key = KEPT_WIDGET_PREFIX + key
    st.session_state[widget_key] = st.session_state[key]
    return {"key": widget_key, "on_change": _keep_widget_value, "args": (key,)}


def _keep_widget_value(key: str) -> None:
    """A kept widget's change callback: the user's new value becomes the app's (before the script runs)."""
    st.session_state[key] = st.session_state[KEPT_WIDGET_PREFIX + key]


def sidebar_and_analyze() -> None:
    st.session_state.update(_xc_routed=True, busy=False)   # busy: refused by this session's bound, in this run
    sb = st.sidebar
    sb.caption("Compile one model for every target; see what each compiler decided.")
    # ?run=ID in the URL opens a stored run on any page (links from a PR comment or the CLI).
    wanted_run = st.query_params.get("run")
    if wanted_run and "source_mode" not in st.session_state:
        st.session_state.update(source_mode=SAVED_RUN, saved_run_ref=wanted_run)
    mode = sb.radio("Source", ["Bundled sample", "Upload", SAVED_RUN], horizontal=True,
                    **kept_widget("source_mode", "Bundled sample"))
    if mode == SAVED_RUN:
        _saved_run(sb)
        return
    upload = npz = None
    if mode == "Bundled sample":
        from xc_core.sources.samples import DEFAULT_SAMPLE, SAMPLES    # torch: imported after the page list is drawn
        names = list(SAMPLES)
        # ?sample=NAME in the URL opens that sample (links for demos and PR comments).
        wanted = st.query_params.get("sample")
        if "sample" not in st.session_state and wanted in SAMPLES:
            st.session_state["sample"] = wanted
        sample = sb.selectbox("Sample", names, format_func=lambda n: n, help="Defined in code with seeded weights",
                              **kept_widget("sample", DEFAULT_SAMPLE))
        sb.caption(SAMPLES[sample].description)
    else:
        upload = sb.file_uploader("Model", type=UPLOAD_TYPES, key="upload", accept_multiple_files=True,
                                  help=".pt2 (torch.export.save), TorchScript (.pt, .jit, .ptl), a sample's "
                                       "state_dict (.pt, .safetensors), .onnx, a Core ML ML program (.mlmodel / "
                                       "zipped .mlpackage), a zipped OpenVINO IR (.xml + .bin) or a LiteRT .tflite; "
                                       "recognised by "
                                       "content. An ONNX model with external data (model.onnx + model.onnx.data, "
                                       "as torch.onnx.export writes it): select the model and its data files "
                                       "together, or upload a zip of its folder")
        npz = sb.file_uploader("Inputs (.npz, optional)", type=["npz"], key="upload_npz")
        from xc_core.inputs.dataset import PREPROCESSINGS
        # Task accuracy: every sample runs on every target (xc_core/inputs/dataset.py bounds and checks it).
        dataset_up = sb.file_uploader("Dataset (.npz or .zip of samples, optional)", type=["npz", "zip"],
                                      key="upload_dataset",
                                      help="An .npz of arrays by input name (leading axis = samples, optional "
                                           "`labels`), or a .zip of per-sample .npy / .npz, images or .wav files "
                                           "with labels.csv, labels.txt or labels.json (and classes.txt)")
        preprocess = sb.selectbox("Dataset preprocessing", ["auto"] + list(PREPROCESSINGS), key="upload_preprocess",
                                  help="How images or audio become the model's input (auto: image-01 for images, "
                                       "audio-waveform for .wav)")
    available = default_targets()
    # ?targets=ort-cpu,ort-cpu[level=basic] in the URL preselects targets and variants (links to a comparison).
    wanted_targets = _variants_from_link(st.query_params.get("targets") or "")
    if "targets" not in st.session_state and wanted_targets:
        st.session_state["targets"] = wanted_targets
        st.session_state["target_variants"] = [t for t in wanted_targets if t not in REGISTRY]
    variants = st.session_state.setdefault("target_variants", [])
    targets = sb.multiselect("Targets", target_ids() + variants, format_func=target_option_label,
                             help="Starts with every target this host can run but the deprecated ones, which "
                                  "stay here to pick (or those the deployment's XC_DEFAULT_TARGETS names)",
                             **kept_widget("targets", available))
    _variant_form(sb)
    options: dict[str, dict] = {}       # a target's options live in its identity: the variant form sets them
    if not targets:
        st.session_state.update(report=None, pending=None, failed=None, report_hint=True,
                                report_error="Pick at least one target in the sidebar to compare.")
        return
    if mode == "Upload" and not upload:
        st.session_state.update(report=None, pending=None, failed=None, report_hint=True, report_error=(
            "Drop a model in the sidebar — .pt2, .pt (TorchScript or a sample's state_dict), .onnx (with its "
            "external-data files, or zipped with them), or a Core ML model — or switch to a bundled sample to see "
            "xc at work."))
        return
    st.session_state["report_hint"] = False
    if mode == "Upload":
        from xc_core.errors import XcInputError
        from xc_core.service import take_upload
        try:
            taken = take_upload([(u.name, u.getvalue()) for u in upload])
        except XcInputError as e:
            st.session_state.update(report=None, pending=None, failed=None, report_error=e.for_dashboard())
            return

    limits = _worker_limits(sb)
    if mode == "Bundled sample":
        source_key = f"sample:{sample}"
        spec, files, submit = f"sample:{sample}", None, {}
    else:
        npz_data = npz.getvalue() if npz is not None else b""
        # Every file's content: a changed data file is another model.
        source_key = taken.digest + "|" + hashlib.sha256(npz_data).hexdigest()
        # The upload is written to a scratch folder only while it is analysed; the folder goes, also on error.
        spec, files, submit = None, dict(taken.files), {"model_file": taken.model_file}
        if npz is not None:
            npz_file = next(n for n in ("inputs.npz", "xc-inputs.npz", "xc-inputs-1.npz") if n not in files)
            files[npz_file] = npz_data
            submit["inputs_npz"] = npz_file
        if dataset_up is not None:
            data = dataset_up.getvalue()
            ext = ".zip" if dataset_up.name.lower().endswith(".zip") else ".npz"
            data_file = next(n for n in (f"dataset{ext}", f"xc-dataset{ext}") if n not in files)
            files[data_file] = data
            submit["data"] = data_file
            submit["preprocess"] = None if preprocess == "auto" else preprocess
            source_key += "|" + hashlib.sha256(data).hexdigest() + "|" + preprocess
    edits = _inputs_panel.overrides(source_key)
    key = request_key(source_key, targets, options, edits, limits)
    report, needs = None, []
    if st.session_state.get("report_key") == key and st.session_state.get("report") is not None:
        report = st.session_state["report"]          # this session already holds it: no store read per click
    else:
        from xc_core.service import SessionBusy
        svc = _service()
        try:
            a = svc.get(key) or svc.submit(key, spec, files, session=_session_id(), user=_auth.user(),
                                           targets=targets, target_options=options, worker_limits=limits,
                                           **submit, **edits)
        except SessionBusy as e:      # this session's own analyses fill its bound: one line, nothing started
            st.session_state.update(report=None, pending=None, failed=None, busy=True,
                                    report_error=e.for_dashboard())
            return
        _adopt(a)
        report, needs = a.report, a.needs_shapes
    typed = session_report(report) if report is not None else None
    if typed is not None:
        if not edits:
            _inputs_panel.remember_auto(source_key, typed)
        from xc_core.views.rows import run_status
        label, state = run_status(typed)
        (sb.warning if state == "error" else sb.caption)(plain(label))
        run_id = run_key(typed)
        if run_id:      # the link a reviewer pastes: this run on any page, without analysing again
            sb.caption(f"Run `{run_id[:12]}` · link: `?run={run_id[:12]}`")
    _inputs_panel.render(sb, source_key, typed, needs)


def _session_id() -> str:
    """This browser session's id, for the service's bound on the analyses one session has in flight."""
    import uuid
    return st.session_state.setdefault("_xc_session", uuid.uuid4().hex)


def _saved_run(sb) -> None:
    """A run from the store — the dashboard's own, the CLI's, or a report.json imported on the History page."""
    from xc_core.errors import XcInputError
    from xc_core.review.runs import resolve_key
    store = _service().store
    runs = store.runs()
    keys = [r["key"] for r in runs]
    ref = st.session_state.pop("saved_run_ref", None)
    if ref:
        try:
            st.session_state["saved_run"] = resolve_key(ref, store)
        except XcInputError as e:
            st.session_state.update(report=None, pending=None, report_error=e.for_dashboard())
            return
    if not keys:
        st.session_state.update(report=None, pending=None, report_error=(
            "No saved runs yet: analyze a sample or an upload, run the CLI, or open a report.json on the History "
            "page."))
        return
    if st.session_state.get("saved_run") not in keys:
        st.session_state["saved_run"] = keys[0]
    labels = {r["key"]: run_label(r) for r in runs}
    key = sb.selectbox("Run", keys, format_func=lambda k: labels[k], **kept_widget("saved_run", keys[0]))
    if st.session_state.get("report_key") != key or st.session_state.get("report") is None:
        report = store.get(key)
        st.session_state.update(report=report, report_key=key if report else None, pending=None, failed=None,
                                report_error=None if report else f"run {key[:12]}: its report is gone from the store")
    sb.caption(f"Run `{key[:12]}` · link: `?run={key[:12]}`")


def run_label(r: dict) -> str:
    """A stored run in one line: model, when, where from (and who started it, where the dashboard knows), targets."""
    import datetime
    when = datetime.datetime.fromtimestamp(r["created"]).strftime("%Y-%m-%d %H:%M")
    s = r.get("summary") or {}
    n = len((r.get("targets") or "").split(",")) if r.get("targets") else 0
    origin = s.get("origin", "?") + (f" by {r['user']}" if r.get("user") else "")
    return f"{r['source_name'] or '?'} · {when} · {origin} · {n} target(s) · {r['key'][:8]}"


def run_key(report: Report) -> str | None:
    """The run store's key of the report's run (None: a report that was never stored)."""
    return report.run.key


def run_files(report: Report) -> dict[str, str]:
    """The run's files (path in the run → file on disk) from the store; {} for a run that is not there."""
    key = run_key(report)
    return _service().store.files(key) if key else {}


def _worker_limits(sb):
    """Per-worker limits; part of the run's identity (a target that timed out may pass with more time)."""
    from xc_core.worker import DEFAULT_MEMORY_GIB, DEFAULT_TIMEOUT_S, WorkerLimits
    base = WorkerLimits.from_env()
    with sb.expander("Worker limits"):
        st.caption("Every target compiles in its own worker process; one that crashes, hangs or runs out of "
                   "memory becomes that target's error.")
        timeout = st.number_input("Time per target (s)", 5.0, 3600.0, step=5.0,
                                  help=f"default {DEFAULT_TIMEOUT_S:g} s (XC_TIMEOUT_S)",
                                  **kept_widget("limit_timeout", float(base.timeout_s)))
        memory = st.number_input("Memory per target (GiB)", 0.5, 256.0, step=0.5,
                                 help=f"default {DEFAULT_MEMORY_GIB:g} GiB (XC_MEMORY_GIB)",
                                 **kept_widget("limit_memory", float(base.memory_gib)))
    return session_limits(timeout, memory)


def _safe_filename(name: str) -> str:
    """The browser's file name, kept for its extension and for the report, but never a path."""
    from xc_core.service import safe_name
    return safe_name(name)


def _variants_from_link(text: str) -> list[str]:
    """Targets and variants named in a link, as identities; anything unknown is left out."""
    from xc_core.errors import XcInputError
    from xc_core.targets import make_target, split_target_list
    out = []
    for spec in split_target_list(text):
        try:
            out.append(make_target(spec).identity)
        except XcInputError:
            continue
    return list(dict.fromkeys(out))


def _variant_form(sb) -> None:
    """Add a target again with other options: a variant is its own column on every page."""
    with sb.expander("Add a variant (a target with other options)"):
        with_options = [t for t in target_ids() if REGISTRY[t].option_specs()]
        tid = st.selectbox("Target", with_options, key="variant_target", format_func=target_option_label)
        # One widget per field of the target's Options dataclass: its choices, its default, its help.
        for opt in REGISTRY[tid].option_specs():
            key = f"variant_opt_{tid}_{opt.name}"
            if opt.choices:
                st.selectbox(opt.name, ["default", *opt.choices], key=key, help=opt.help, format_func=str)
            else:
                st.text_input(opt.name, key=key, help=opt.help,
                              placeholder="default" if opt.default is None else f"default ({opt.default})")
        st.button("Add variant", key="variant_add", on_click=_add_variant, args=(tid,))
        if st.session_state.get("variant_error"):
            st.error(plain(st.session_state["variant_error"]))


def _add_variant(tid: str) -> None:
    """Button callback (runs before the script, so the Targets widget may still be changed)."""
    from xc_core.errors import XcInputError
    from xc_core.targets import make_target
    opts = {}
    for opt in REGISTRY[tid].option_specs():
        value = st.session_state.get(f"variant_opt_{tid}_{opt.name}")
        if value not in (None, "", "default"):
            opts[opt.name] = value
    st.session_state["variant_error"] = None
    if not opts:
        st.session_state["variant_error"] = "Set at least one option: a variant differs from the target's defaults."
        return
    try:
        identity = make_target(tid, **opts).identity     # each value read as its option's type, as the CLI does
    except XcInputError as e:
        st.session_state["variant_error"] = e.for_dashboard()
        return
    variants = st.session_state.setdefault("target_variants", [])
    if identity not in variants:
        variants.append(identity)
    chosen = list(st.session_state.get("targets") or [])
    if identity not in chosen:
        st.session_state["targets"] = chosen + [identity]


_PREVIEW_WAIT = "_xc_preview_wait"


@st.fragment(run_every=1.0)
def _progress(key: str) -> None:
    """Polls the background analysis; when it ends, the whole app reruns and the page renders the report."""
    from xc_core.service import QUEUED
    svc = _service()
    a = svc.get(key)
    if a is None or not a.active:
        st.rerun()
    wait = st.session_state.get(_PREVIEW_WAIT)
    if wait and wait[0] == key and len(a.events) > wait[1]:
        st.session_state[_PREVIEW_WAIT] = None
        st.rerun()      # the page draws something while it waits (the captured graph): a step it needs may be done
    if a.state == QUEUED:
        ahead = svc.queue_position(a)
        label = ("Waiting for a free analysis slot — queued: " +
                 (f"{ahead} {'analysis' if ahead == 1 else 'analyses'} ahead" if ahead else "next in line") +
                 f" (this server runs {svc.max_concurrent} at once)…")
    else:
        label = "Compiling…"
    # Not `with st.status(...)`: leaving the block would mark it complete while the analysis still runs.
    box = st.status(label, expanded=True, state="running")
    lines, fraction = progress_lines(a.events)
    box.progress(fraction)
    for line in lines or ["Starting the workers …"]:
        box.markdown(line)


def _adopt(a) -> None:
    """The session's view of an analysis: its report, or why there is none, or that it is still running."""
    done = a.state == DONE
    st.session_state.update(report=a.report if done else None, report_key=a.key if done else None,
                            report_error=None if done or a.active else a.error,
                            pending=a.key if a.active else None, failed=a.key if a.state == FAILED else None)


def _take_finished(key: str) -> bool:
    """If the analysis this session waits for has ended, take its outcome into the session (a page may rerun
    without the sidebar, e.g. from the polling fragment)."""
    a = _service().get(key)
    if a is None or a.active:
        return False
    _adopt(a)
    return True


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
            st.Page("pages/stages.py", title="Stages", icon=":material/stacked_line_chart:"),
            st.Page("pages/drift.py", title="Drift", icon=":material/show_chart:"),
            st.Page("pages/precision.py", title="Precision", icon=":material/tune:"),
            st.Page("pages/checklist.py", title="Checklist", icon=":material/checklist:"),
        ],
        "Accelerators": [
            st.Page("pages/fallbacks.py", title="Fallbacks", icon=":material/warning:"),
            st.Page("pages/coreml.py", title="Core ML", icon=":material/phone_iphone:"),
        ],
        "Review": [
            st.Page("pages/history.py", title="History", icon=":material/history:"),
            st.Page("pages/compare.py", title="Compare runs", icon=":material/difference:"),
            st.Page("pages/fleet.py", title="Fleet", icon=":material/view_module:"),
            st.Page("pages/downloads.py", title="Downloads", icon=":material/download:"),
        ],
    }


def navigation():
    """st.navigation over pages(), every entry listed: past twelve pages Streamlit by default shows ten and
    folds the rest under "View more", hiding Review's pages from a first look. A visitor who must sign in first
    gets only the sign-in screen, unlisted: whatever page an address names, it is the one that runs."""
    if _auth.must_sign_in():
        hidden = [st.Page(_auth.sign_in_screen, title="Sign in", url_path="sign-in", default=True)]
        hidden += [st.Page(_auth.sign_in_screen, title="Sign in", url_path=p.url_path)
                   for section in pages().values() for p in section if p.url_path]   # "": the default page
        return st.navigation(hidden, position="hidden")
    return st.navigation(pages(), expanded=True)


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
        navigation()
        PagesManager.uses_pages_directory = False
        st.rerun()


def guard_page() -> None:
    """The first line of every page: a page runs only through app.py (its sign-in gate, then its sidebar)."""
    if not st.session_state.get("_xc_routed"):
        # A page file run on its own (the legacy mode above, first request of a fresh server): through app.py.
        leave_legacy_pages_mode()
        st.rerun()
    if _auth.must_sign_in():
        st.stop()


def require_report(while_running=None) -> Report:
    """The page's Report, or an explanation of why there is none (then the page stops).

    `while_running(analysis) -> bool` draws what a page can show before the report is ready (the Topology page:
    the captured graph); it returns whether it drew anything, and until it has, the progress poll reruns the
    page when a new step finishes."""
    guard_page()
    report = st.session_state.get("report")
    if report is None and st.session_state.get("pending") and not _take_finished(st.session_state["pending"]):
        key = st.session_state["pending"]
        a = _service().get(key)
        seen = len(a.events) if a is not None else 0
        _progress(key)
        drawn = bool(while_running and while_running(a))
        # Until the page has drawn, the poll reruns it once more steps have finished.
        st.session_state[_PREVIEW_WAIT] = (key, seen) if while_running and not drawn else None
        st.stop()
    report = st.session_state.get("report")
    if report is None:
        # Nothing chosen yet is an invitation, not an error.
        box = st.info if st.session_state.get("report_hint") else st.error
        box(plain(st.session_state.get("report_error") or "No report yet."))
        if st.session_state.get("failed") and st.button("Try again", key="retry"):
            _service().forget(st.session_state["failed"])
            st.session_state["failed"] = None
            st.rerun()
        if st.session_state.get("busy") and st.button("Try again", key="retry_busy"):
            st.rerun()      # the sidebar asks for the analysis again
        st.stop()
    return session_report(report)


_SESSION_REPORT = "_xc_session_report"


def session_report(report: dict) -> Report:
    """The session's report dict as a Report, converted once per report and kept beside it in the session: every
    page run reads the same object, so the pages' caches keyed on its identity (the Topology's) keep hitting."""
    kept = st.session_state.get(_SESSION_REPORT)
    if kept is None or kept[0] is not report:
        kept = (report, as_report(report))
        st.session_state[_SESSION_REPORT] = kept
    return kept[1]


def stored_report(report: Report) -> dict:
    """The report exactly as the run store keeps it (for report.json downloads: an older report not upgraded)."""
    kept = st.session_state.get(_SESSION_REPORT)
    return kept[0] if kept is not None and kept[1] is report else report.to_dict()


def full_message(detail: str | None) -> None:
    """The runtime's whole message, one click away from its summary."""
    if detail and "\n" in detail.strip():
        with st.expander("Full message"):
            st.code(detail, language=None)


def stop_unless_targets(targets: list[str], failed: dict[str, str], none_message: str) -> None:
    """The head of a page with a column per target: with no target to show, the failed ones' columns (each saying
    why it has nothing to show) or `none_message`, and the page stops."""
    if not targets:
        if failed:
            _failed_columns(st.columns(len(failed)), failed)
        else:
            st.info(none_message)
        st.stop()


MAX_TARGET_COLUMNS = 3     # side by side, each target's metrics stay legible; more targets wrap to the next row


def target_columns(targets: list[str], failed: dict[str, str]) -> list:
    """A column per shown target, then a labelled column per failed one, at most MAX_TARGET_COLUMNS a row; returns
    the shown targets' columns."""
    n = len(targets) + len(failed)
    cols = []
    for start in range(0, n, MAX_TARGET_COLUMNS):
        cols += st.columns(MAX_TARGET_COLUMNS if n > MAX_TARGET_COLUMNS else n)[:n - start]
    _failed_columns(cols[len(targets):], failed)
    return cols[:len(targets)]


def _failed_columns(cols, failed: dict[str, str]) -> None:
    for col, (tid, why) in zip(cols, failed.items()):
        with col:
            st.subheader(plain(tid))
            st.error(f"{plain(why)} — nothing to show; the Overview has the whole message.")


def header(report: Report, title: str) -> None:
    src = report.source
    st.title(title)
    # An imported report is anyone's text: the name escaped (never a link or markup), the code spans kept to the
    # characters a sha256 and a target id have (a backtick would end the span).
    sha = re.sub(r"[^0-9a-f]", "", str(src.sha256))[:12]
    ref = re.sub(r"[^\w.\-\[\]=,]", "", str(report.reference.id))   # none: "", shown as —
    st.caption(f"**{plain(src.name)}** · {plain(src.kind)} · sha256 `{sha}` · reference `{ref or '—'}`")


def file_reader(path: str):
    """A download's data, read only when the button is clicked (Streamlit runs the callable then)."""
    def read() -> bytes:
        with open(path, "rb") as f:
            return f.read()
    return read


def report_and_sidecar(uploads: list):
    """Of the files uploaded together: the report.json and its sidecar's bytes (None when there is none). The
    sidecar is told by its name; the report is the other file (or the first)."""
    from xc_core.report.sidecar import SIDECAR_FILES
    sidecars = [u for u in uploads if u.name in SIDECAR_FILES]
    reports = [u for u in uploads if u.name not in SIDECAR_FILES] or uploads
    return reports[0], (sidecars[0].getvalue() if sidecars else None)


def target_label(report: Report):
    """A selectbox format_func: a target's identity with its label as configured."""
    def fmt(tid: str) -> str:
        target = report.targets.get(tid)
        label = target.label if target else None
        return f"{tid} — {label}" if label else tid
    return fmt


# ------------------------------------------------------------------------------------------- stage graphs
STAGE_PICKS = "topo_stage_graphs"   # the step graphs the Topology page shows as extra panes
STAGE_REQUEST = "_stage_graph_request"


def stage_graph_file(report: Report, files: dict | None = None) -> str | None:
    """stages.json of this run on disk (from the run store), or None when the run kept none."""
    name = report.stage_graphs.file
    if not name:
        return None
    files = run_files(report) if files is None else files
    return files.get(name)


@st.cache_resource(max_entries=4, show_spinner="Reading the step graphs…")
def _stage_graphs(path: str) -> dict:
    from xc_core.analysis.stage_trace import read_stage_graphs
    return read_stage_graphs(path)


def stage_graphs(report: Report) -> dict:
    """Step graphs by key ({} when the run kept none); read once per file and shared by the sessions."""
    path = stage_graph_file(report)
    return _stage_graphs(path) if path else {}


def request_stage_graph(report: Report, tid: str, step: int) -> None:
    """A button callback: the Topology page, when next opened, shows this step graph beside its target's compiled
    graph. Kept under a plain key (widget keys of a page not on screen are dropped at the end of a run) and
    applied by the Topology page before it draws its widgets."""
    from xc_core.views.rows import stage_graph_choices
    label = next((lab for t, i, lab in stage_graph_choices(report) if (t, i) == (tid, step)), None)
    if label is not None:
        st.session_state[STAGE_REQUEST] = {"picks": [label], "targets": [label, tid]}


def apply_stage_request() -> None:
    """On the Topology page, before its widgets: take a request made on the Stages page."""
    req = st.session_state.pop(STAGE_REQUEST, None)
    if req:
        st.session_state[STAGE_PICKS] = req["picks"]
        st.session_state["topo_targets"] = req["targets"]
