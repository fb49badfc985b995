"""Analyses for a server: started in the background, computed once per key, kept in the run store.

The dashboard's script threads must not run an analysis themselves: a page would hang for its whole duration
and the server would stop answering. Here an analysis runs in a thread of its own (whose work is in worker
processes, so it mostly waits), every session asking for the same key shares it, and its progress events are
there to poll. A finished report goes into the RunStore, so re-opening a model after a restart is instant; a
refusal (bad input) is remembered in memory so clicking through pages does not analyse a bad file again. When the
store cannot keep runs (its index cannot be opened: xc_core.store says why, once), finished reports are kept in
memory instead, the most recent MAX_KEPT_IN_MEMORY of them, so the dashboard still works, only without history.

Two bounds keep one server usable by many people: analyses run at most `concurrent_analyses()` at once (the machine's
cores, or XC_CONCURRENT_ANALYSES), the rest wait their turn in the order they were asked for (`queue_position` is
exact); and one browser session has at most `session_analyses()` analyses of its own queued or running (2, or
XC_SESSION_ANALYSES), so clicking through targets cannot fill the queue — one more is refused in one line
(SessionBusy). Joining an analysis that is already under way costs nothing and is never refused.
"""
from __future__ import annotations

import collections
import os
import re
import shutil
import threading
import time
import weakref
from dataclasses import dataclass, field

from .errors import XcInputError
from .paths import scratch_dir, sweep_scratch
from .sources.formats import EXTERNAL_DATA_EXTENSIONS, model_extensions
from .store import RunStore, StoreUnavailable, say_once

QUEUED, RUNNING, DONE, REFUSED, FAILED = "queued", "running", "done", "refused", "failed"
MAX_REMEMBERED_REFUSALS = 256
MAX_KEPT_IN_MEMORY = 16     # finished reports held when the store cannot keep them (each can be tens of MB)
DEFAULT_SESSION_ANALYSES = 2    # a session's own analyses queued or running at once (XC_SESSION_ANALYSES)
# What a model upload's main file may be called when it comes with other files; the others are its data.
# Which uploaded file is the model, and which are an ONNX model's external data (sources/formats.py, the one table).
MODEL_EXTENSIONS = model_extensions()
DATA_EXTENSIONS = EXTERNAL_DATA_EXTENSIONS


def on_server_start() -> int:
    """What a dashboard server does once, before any session: sweep the scratch folders a crashed or killed
    process left (an upload, a half-written run), and open the run store so a damaged index is repaired (or
    found unusable) now, in the server's log, rather than in the first visitor's page. Returns how many folders
    were swept."""
    try:
        swept = sweep_scratch()
        store = RunStore()
        if store.problem:
            say_once(store.problem)
        return swept
    except Exception as e:  # noqa: BLE001 — a server that cannot tidy up still serves: one line in its log
        say_once(f"the start-up sweep failed ({type(e).__name__}: {e}); the server carries on")
        return 0


def safe_name(name: str) -> str:
    """A browser's file name, kept for its extension and for the report, but never a path: a base name of letters,
    digits, '.', '_' and '-', not hidden."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(str(name or "upload").replace("\\", "/")))
    return base[-120:].lstrip(".") or "upload"


@dataclass
class Upload:
    """A model upload as the service takes it: files by safe base name, which one is the model, and a digest of
    every file (the run key's source part)."""
    files: dict[str, bytes]
    model_file: str
    digest: str


def take_upload(named: list[tuple[str, bytes]], limits=None) -> Upload:
    """The files a user dropped on the Model uploader: one model file, or an ONNX model with the external-data files
    it names (torch.onnx.export(dynamo=True) writes model.onnx + model.onnx.data). Names are reduced to safe base
    names; with several files the model is the one named like a model (.onnx), and there must be exactly one; the
    files together are bounded like one model file. Whether the model's data files are all there is checked when it
    is loaded (its worker reads the names it references). Raises XcInputError with one line."""
    import hashlib

    from .limits import Limits, exceeded
    limits = limits or Limits.from_env()
    files: dict[str, bytes] = {}
    for name, data in named:
        safe = safe_name(name)
        if safe in files and files[safe] != data:
            raise XcInputError(f"two uploaded files are both named {safe} once their names are kept to letters, "
                               "digits, '.', '_' and '-'; rename one, or upload a zip of the model's folder")
        files[safe] = data
    if not files:
        raise XcInputError("no file was uploaded; accepted: a model file, or an ONNX model with its external-data "
                           "files")
    total = sum(len(d) for d in files.values())
    if total > limits.bytes("max_file_mb"):
        what = "the uploaded file is" if len(files) == 1 else f"the {len(files)} uploaded files total"
        raise exceeded("max_file_mb", what, total, limits)
    if len(files) == 1:
        (model,) = files
        if model.lower().endswith(DATA_EXTENSIONS):
            raise XcInputError(f"{model} is an ONNX model's external data, not a model; add the model (.onnx) to the "
                               "upload, or upload a zip of the model's folder")
        return Upload(files, model, hashlib.sha256(files[model]).hexdigest())

    def listed(names) -> str:
        names = sorted(names)
        return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")

    models = [n for n in files if n.lower().endswith(MODEL_EXTENSIONS)]
    if not models:
        raise XcInputError(f"none of the {len(files)} uploaded files ({listed(files)}) is a model file: with several "
                           "files, one must be the ONNX model (.onnx) and the others its external-data files; add "
                           "the model to the upload, or upload a zip of the model's folder")
    if len(models) > 1:
        raise XcInputError(f"{len(models)} model files in one upload ({listed(models)}); accepted: one model, with "
                           "the external-data files of an ONNX model — analyse the others one at a time")
    model = models[0]
    if not model.lower().endswith(".onnx"):
        raise XcInputError(f"{model} came with {len(files) - 1} other file(s) ({listed(set(files) - {model})}); "
                           f"only an ONNX model (.onnx) has external-data files — upload {model} alone")
    # The model and the data files by the names the model uses: the digest the CLI computes for the same files on
    # disk (run_keys.source_digest), so either finds the other's runs.
    from .run_keys import upload_digest
    return Upload(files, model, upload_digest(model, files))


def _bound_from_env(name: str, default: int) -> int:
    """A whole number of at least 1 from the environment; anything else is said once in the server's log, and the
    default is used (a server started with a typo still serves)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        if int(text) >= 1:
            return int(text)
    except ValueError:
        pass
    say_once(f"{name}={text!r} is not a whole number of at least 1; using {default}")
    return default


def concurrent_analyses() -> int:
    """How many analyses a server runs at once: XC_CONCURRENT_ANALYSES, else the cores this process may use (an
    analysis's targets compile in worker processes, so more at once would only share the same cores)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:      # no affinity call on this platform
        cores = os.cpu_count() or 1
    return _bound_from_env("XC_CONCURRENT_ANALYSES", max(1, cores))


def session_analyses() -> int:
    """How many analyses of its own one browser session may have queued or running (XC_SESSION_ANALYSES)."""
    return _bound_from_env("XC_SESSION_ANALYSES", DEFAULT_SESSION_ANALYSES)


class SessionBusy(XcInputError):
    """A session asked for another analysis while its bound's worth of its own are still queued or running."""


@dataclass
class Analysis:
    key: str
    state: str = QUEUED
    events: list = field(default_factory=list)   # progress events, as analyze() emits them
    report: dict | None = None
    error: str | None = None                     # refused / failed: the one line to show
    needs_shapes: list = field(default_factory=list)
    submitted: float = field(default_factory=time.time)
    finished: threading.Event = field(default_factory=threading.Event)
    session: str | None = None                   # the browser session that started it (its per-session bound)
    user: str | None = None                      # who started it, recorded with the run (a dashboard's sign-in)

    @property
    def active(self) -> bool:
        return self.state in (QUEUED, RUNNING)


def warm_start_enabled() -> bool:
    """Whether a dashboard server warms up when it starts (XC_WARM_START, default on): its workers and the default
    sample's analysis. Off for a server that will not show that sample (tests of other models on a shared
    machine)."""
    return os.environ.get("XC_WARM_START", "1").strip().lower() not in ("0", "false", "no", "off")


def _ready_job(args: dict, workdir: str, phase) -> dict:
    """A job that only starts (start_workers)."""
    return {}


def start_workers() -> threading.Thread:
    """Launch the worker forkserver now, in the background: it imports torch, ONNX Runtime, OpenVINO and coremltools
    once (≈4 s), on another core while the server imports its own modules, so the first analysis's workers fork at
    once. Returns the thread."""
    def run() -> None:
        from .worker import Job, WorkerLimits, run_jobs
        workdir = scratch_dir("warm-workers")
        try:
            out = run_jobs([Job("warm-workers", "xc_core.service:_ready_job", {}, os.path.join(workdir, "job"))],
                           WorkerLimits.from_env())["warm-workers"]
            if not out.ok:          # only slower: the first analysis starts the workers itself
                say_once(f"starting the workers ahead failed ({out.error}); the first analysis starts them")
        except Exception as e:  # noqa: BLE001 — a warm-up that fails costs time, never the server
            say_once(f"starting the workers ahead failed ({type(e).__name__}: {e}); the first analysis starts them")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    t = threading.Thread(target=run, name="xc-warm-workers", daemon=True)
    t.start()
    return t


_SHARED = None
_SHARED_LOCK = threading.Lock()


def shared_service() -> "AnalysisService":
    """The server's one service, for its sessions and its start-up hook alike: an analysis the server starts
    before anyone visits is the one the first session joins."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = AnalysisService()
        return _SHARED


def request_cells(spec: str | None, files: dict[str, bytes], kwargs: dict) -> dict[str, str]:
    """The cell keys (target identity → key, run_keys.py) of what submit() was asked: `spec` (a sample) or the
    upload's `files` with kwargs' model_file and inputs_npz, and the analysis keywords (targets, target_options,
    shapes, dims, values, ranges, limits) — the keys the CLI and `xc batch` compute for the same request."""
    import hashlib

    from .run_keys import cell_keys, request_parts, source_digest, upload_digest
    if files:
        source_sha = upload_digest(kwargs["model_file"], files)
        npz = kwargs.get("inputs_npz")
        inputs_sha = hashlib.sha256(files[npz]).hexdigest() if npz else None
    else:
        source_sha, inputs_sha = source_digest(spec), None
    dataset = None
    if files and kwargs.get("data"):        # the dashboard's dataset upload: keyed like `xc analyze --data`
        dataset = {"sha256": hashlib.sha256(files[kwargs["data"]]).hexdigest(),
                   **({"preprocess": kwargs["preprocess"]} if kwargs.get("preprocess") else {})}
    parts = request_parts(source_sha, inputs_sha, shapes=kwargs.get("shapes"), dims=kwargs.get("dims"),
                          values=kwargs.get("values"), ranges=kwargs.get("ranges"), limits=kwargs.get("limits"),
                          dataset=dataset)
    return cell_keys(parts, list(kwargs.get("targets") or []), kwargs.get("target_options"))


class AnalysisService:
    _instances: "weakref.WeakSet[AnalysisService]" = weakref.WeakSet()

    def __init__(self, store: RunStore | None = None, max_concurrent: int | None = None,
                 per_session: int | None = None):
        AnalysisService._instances.add(self)
        self.store = store or RunStore()
        self.max_concurrent = max(1, max_concurrent or concurrent_analyses())
        self.per_session = max(1, per_session or session_analyses())
        self._lock = threading.Lock()
        # Analyses waiting for a slot, first asked first served; a finished analysis wakes the next in line.
        self._waiting: collections.deque[Analysis] = collections.deque()
        self._running = 0
        self._turn = threading.Condition(self._lock)
        self._active: dict[str, Analysis] = {}
        self._refused: collections.OrderedDict[str, Analysis] = collections.OrderedDict()
        self._kept: collections.OrderedDict[str, Analysis] = collections.OrderedDict()
        # The server sweeps when it starts (on_server_start); a service made elsewhere (AppTest, a script) sweeps
        # what a crashed or killed process left here.
        sweep_scratch()
        if self.store.problem:
            say_once(self.store.problem)

    def wait_idle(self, timeout_s: float = 600) -> bool:
        """Wait until no analysis is in flight (a test session ending, a server shutting down); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                pending = [a for a in self._active.values() if not a.finished.is_set()]
            if not pending:
                return True
            if not pending[0].finished.wait(max(0.0, deadline - time.monotonic())):
                return False

    @classmethod
    def all_idle(cls, timeout_s: float = 600) -> bool:
        return all(svc.wait_idle(timeout_s) for svc in list(cls._instances))

    def get(self, key: str) -> Analysis | None:
        """The analysis for this key: in flight, refused, or finished (from the store); None if never run."""
        with self._lock:
            a = self._active.get(key) or self._refused.get(key) or self._kept.get(key)
        if a is not None:
            return a
        report = self.store.get(key)
        if report is None:
            return None
        a = Analysis(key, DONE, report=report)
        a.finished.set()
        return a

    def submit(self, key: str, spec: str | None, files: dict[str, bytes] | None = None, *,
               session: str | None = None, user: str | None = None, **kwargs) -> Analysis:
        """Start (or join) the analysis of `key`. `spec` is `sample:NAME`, or None with `files`: an upload's
        bytes by file name, written to a scratch folder for the run (kwarg "inputs_npz" names one of them).
        `session` names the browser session asking (None: the server itself, unbounded); a session that already has
        `per_session` analyses of its own queued or running gets SessionBusy. `user` is recorded with the run."""
        with self._lock:
            a = self._active.get(key)
            if a is not None:
                return a
            if session is not None:
                own = sum(1 for b in self._active.values() if b.session == session and b.active)
                if own >= self.per_session:
                    raise SessionBusy(
                        f"this browser session already has {own} analyses queued or running, the most one session "
                        f"may have (XC_SESSION_ANALYSES={self.per_session} where the dashboard server is started): "
                        "ask again once one of them has finished")
            self._refused.pop(key, None)
            a = self._active[key] = Analysis(key, session=session, user=user)
            self._waiting.append(a)
        threading.Thread(target=self._run, args=(a, spec, files or {}, kwargs), name=f"xc-analysis-{key[:8]}",
                         daemon=True).start()
        return a

    def forget(self, key: str) -> None:
        """Drop a refused or failed result so the next request analyses again."""
        with self._lock:
            self._refused.pop(key, None)
            a = self._active.get(key)
            if a is not None and not a.active:
                self._active.pop(key)

    def queue_position(self, a: Analysis) -> int:
        """How many analyses will start before this queued one (0 once it runs)."""
        with self._lock:
            return next((i for i, b in enumerate(self._waiting) if b is a), 0)

    def _take_slot(self, a: Analysis) -> None:
        """Wait until `a` is first in line and a slot is free, then take the slot."""
        with self._turn:
            while self._waiting[0] is not a or self._running >= self.max_concurrent:
                self._turn.wait()
            self._waiting.popleft()
            self._running += 1
            a.state = RUNNING
            self._turn.notify_all()     # the next in line may start too, when another slot is free

    def _run(self, a: Analysis, spec, files: dict, kwargs: dict) -> None:
        from .api import analyze
        upload_dir = run_dir = None
        self._take_slot(a)
        try:
            try:
                cells = request_cells(spec, files, kwargs)
            except XcInputError:
                cells = {}      # the analysis itself says what is wrong with the request, in its own words
            if files:
                upload_dir = scratch_dir("upload")
                paths = {}
                for name, data in files.items():
                    # the page sanitises upload names; a base name here all the same (never a path out)
                    safe = os.path.basename(str(name).replace("\\", "/")).lstrip(".") or "upload"
                    paths[name] = os.path.join(upload_dir, safe)
                    with open(paths[name], "wb") as f:
                        f.write(data)
                spec = paths[kwargs.pop("model_file")]
                if kwargs.get("inputs_npz"):
                    kwargs["inputs_npz"] = paths[kwargs["inputs_npz"]]
                if kwargs.get("data"):
                    kwargs["data"] = paths[kwargs["data"]]
            run_dir = scratch_dir("dashboard-run")
            report = analyze(spec, out_dir=run_dir, progress=a.events.append, **kwargs)
            # The run folder goes; its files (artifacts/…, as report.json names them) are in the store.
            report.setdefault("run", {})["key"] = a.key
            report["run"]["cell_keys"] = cells      # each target alone: `xc batch` and `--reuse` find it
            try:
                self.store.put(a.key, report, run_dir, origin="dashboard", user=a.user)
            except OSError as e:       # the store cannot keep it (unavailable, a full disk): not lost
                say_once(str(e) if isinstance(e, StoreUnavailable) else
                         f"the run store at {self.store.root} could not keep a run ({e.strerror or e}); "
                         "finished reports are held in memory until the server stops")
                with self._lock:
                    self._kept[a.key] = a
                    while len(self._kept) > MAX_KEPT_IN_MEMORY:
                        self._kept.popitem(last=False)
            a.report, a.state = report, DONE
        except XcInputError as e:
            a.error, a.state = e.for_dashboard(), REFUSED
            a.needs_shapes = list(e.inputs) if e.fix == "shapes" else []
        except Exception as e:  # noqa: BLE001 — a bug in xc: shown as one line, never a traceback
            text = str(e).strip().splitlines()
            a.error, a.state = f"internal error: {type(e).__name__}: {text[0][:300] if text else ''}", FAILED
        finally:
            for d in (upload_dir, run_dir):
                if d:
                    shutil.rmtree(d, ignore_errors=True)
            with self._lock:
                if a.state == REFUSED:
                    self._refused[a.key] = a
                    while len(self._refused) > MAX_REMEMBERED_REFUSALS:
                        self._refused.popitem(last=False)
                if a.state != FAILED:   # a failure stays visible until forgotten (a retry)
                    self._active.pop(a.key, None)
                self._running -= 1
                self._turn.notify_all()
            a.finished.set()
