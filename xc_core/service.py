"""Analyses for a server: started in the background, computed once per key, kept in the run store.

The dashboard's script threads must not run an analysis themselves: a page would hang for its whole duration
and the server would stop answering. Here an analysis runs in a thread of its own (whose work is in worker
processes, so it mostly waits), every session asking for the same key shares it, and its progress events are
there to poll. A finished report goes into the RunStore, so re-opening a model after a restart is instant; a
refusal (bad input) is remembered in memory so clicking through pages does not analyse a bad file again. When the
store cannot keep runs (its index cannot be opened: xc_core.store says why, once), finished reports are kept in
memory instead, the most recent MAX_KEPT_IN_MEMORY of them, so the dashboard still works, only without history.
"""
from __future__ import annotations

import collections
import os
import shutil
import threading
import time
import weakref
from dataclasses import dataclass, field

from .errors import XcInputError
from .store import RunStore, StoreUnavailable, say_once, scratch_dir, sweep_scratch

QUEUED, RUNNING, DONE, REFUSED, FAILED = "queued", "running", "done", "refused", "failed"
MAX_REMEMBERED_REFUSALS = 256
MAX_KEPT_IN_MEMORY = 16     # finished reports held when the store cannot keep them (each can be tens of MB)


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

    @property
    def active(self) -> bool:
        return self.state in (QUEUED, RUNNING)


class AnalysisService:
    _instances: "weakref.WeakSet[AnalysisService]" = weakref.WeakSet()

    def __init__(self, store: RunStore | None = None, max_concurrent: int | None = None):
        AnalysisService._instances.add(self)
        self.store = store or RunStore()
        n = max_concurrent or int(os.environ.get("XC_CONCURRENT_ANALYSES", "2"))
        self._slots = threading.BoundedSemaphore(max(1, n))
        self._lock = threading.Lock()
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

    def submit(self, key: str, spec: str | None, files: dict[str, bytes] | None = None, **kwargs) -> Analysis:
        """Start (or join) the analysis of `key`. `spec` is `sample:NAME`, or None with `files`: an upload's
        bytes by file name, written to a scratch folder for the run (kwarg "inputs_npz" names one of them)."""
        with self._lock:
            a = self._active.get(key)
            if a is not None:
                return a
            self._refused.pop(key, None)
            a = self._active[key] = Analysis(key)
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
        with self._lock:
            return sum(1 for b in self._active.values() if b.state == QUEUED and b.submitted < a.submitted)

    def _run(self, a: Analysis, spec, files: dict, kwargs: dict) -> None:
        from .api import analyze
        upload_dir = run_dir = None
        with self._slots:
            a.state = RUNNING
            try:
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
                run_dir = scratch_dir("dashboard-run")
                report = analyze(spec, out_dir=run_dir, progress=a.events.append, **kwargs)
                # The run folder goes; its files (artifacts/…, as report.json names them) are in the store.
                report.setdefault("run", {})["key"] = a.key
                try:
                    self.store.put(a.key, report, run_dir, origin="dashboard")
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
                a.finished.set()
