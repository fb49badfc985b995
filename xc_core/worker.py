"""Run xc's heavy steps (loading + capture, the reference, every target) in child processes with limits.

Compilers and runtimes are native code that a model can crash (a segfault in OpenVINO), hang (a Loop with a huge
trip count) or blow up (an Expand to 30000×30000). In a child, each of those becomes a sentence in the report
("killed by SIGSEGV in compile", "exceeded 300 s in run", "exceeded the 6 GiB memory limit in compile") and the
other targets, the CLI and the dashboard's server carry on. torch.export and torch.onnx also keep process-wide state
that two analyses in one process break for each other; a process per step removes that too.

Children come from a forkserver: a clean interpreter started once per parent, which imports the heavy libraries
(`xc_core._preload`) and forks a fresh child for each job, so a job starts in milliseconds rather than the seconds
an import of torch + coremltools costs. What crosses back is JSON over a pipe and files in the job's folder (arrays
as .npz read with allow_pickle=False): the parent never unpickles anything a child produced.

Each child runs in its own process group with its own temp folder inside its job folder, so whatever it or a
library it calls leaves behind (coremltools writes packages to the temp dir) goes when the job folder goes.

A converted model is untrusted input to native code, so a child is also confined (`_confine`, before the job runs):
- its environment is an allow-list (the search path, locale, thread settings, compilers, TORCH*/XC_* settings),
  and any name that looks like a credential is dropped even from that, so no token, key or password reaches a
  toolchain;
- HOME, TMPDIR / TEMP / TMP and tempfile's cached temp dir point inside the job folder;
- where the kernel has Landlock (Linux 5.13+, unprivileged), it may write only beneath the job's writable folders
  (its analysis' run folder; the Inductor cache for targets that compile with torch) and /dev/null; on kernels
  that support it, TCP bind / connect are refused, and signals and abstract UNIX sockets cannot reach processes
  outside the sandbox. Reads are not restricted: the toolchains read the whole Python installation.
  `landlock_status()` says what applies here; XC_LANDLOCK=0 turns it off.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import multiprocessing
import os
import re
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import XcInputError

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MEMORY_GIB = 6.0
_POLL_S = 0.05
_RSS_EVERY_S = 0.1       # resident-size checks (psutil reads /proc)
_CHILDREN_EVERY_S = 1.0  # looking for processes the child started scans every pid: rarely
# Workers run at a lower CPU priority than the process that started them: a dashboard server must keep
# answering while its analyses compile.
WORKER_NICENESS = 10
STDERR_TAIL = 4000
_EXTENSION_MODULES = re.compile(r"\n\s*Extension modules: [^\n]*(?:\n|$)")


@dataclass(frozen=True)
class WorkerLimits:
    """Per job: wall time and resident memory (the child's whole process group)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_gib: float = DEFAULT_MEMORY_GIB

    @staticmethod
    def from_env(timeout_s: float | None = None, memory_gib: float | None = None) -> "WorkerLimits":
        def pick(given, env, default):
            if given is not None:
                return float(given)
            text = os.environ.get(env)
            if text:
                try:
                    return float(text)
                except ValueError:
                    raise XcInputError(f"{env}={text!r}: expected a number") from None
            return default
        lim = WorkerLimits(pick(timeout_s, "XC_TIMEOUT_S", DEFAULT_TIMEOUT_S),
                           pick(memory_gib, "XC_MEMORY_GIB", DEFAULT_MEMORY_GIB))
        if lim.timeout_s <= 0 or lim.memory_gib <= 0:
            raise XcInputError(f"--timeout and --memory must be positive (got {lim.timeout_s:g} s, "
                               f"{lim.memory_gib:g} GiB)")
        return lim

    def to_dict(self) -> dict:
        return {"timeout_s": self.timeout_s, "memory_gib": self.memory_gib}


@dataclass
class Job:
    """`func` is "module:function", called in the child as func(args, workdir, phase) and returning JSON-able
    data; `phase(name)` tells the parent which phase of the job is running (for progress and for the reason of a
    kill), and `phase(name, data)` hands it JSON-able data as that phase begins (what a finished one produced)."""
    name: str
    func: str
    args: dict
    workdir: str
    imports: tuple[str, ...] = ()   # modules the child imports first (e.g. where a plug-in target registers)
    # Folders the child may write besides its workdir, where Landlock confines it (e.g. its analysis' run folder).
    writable: tuple[str, ...] = ()


@dataclass
class Outcome:
    name: str
    ok: bool
    value: Any = None
    error: str | None = None          # the reason in words, when not ok
    phase: str | None = None          # the last phase the child announced
    detail: str | None = None         # the end of the child's stderr (a native crash prints there)
    input_error: dict | None = None   # an XcInputError raised in the child: message, fix, inputs
    # Why it is not ok: "input" (XcInputError), "exception" (raised in the child), "signal" (killed by one),
    # "limit" (time or memory), "exit" (left without a result), "cancelled".
    cause: str | None = None
    seconds: float = 0.0
    peak_rss_mib: float = 0.0
    phases: list[str] = field(default_factory=list)


Events = Callable[[str, str, Any], None]   # (job name, phase, the data the child sent with it or None)


def run_jobs(jobs: list[Job], limits: WorkerLimits, parallel: int = 1, on_phase: Events | None = None,
             on_done: Callable[[Outcome], None] | None = None, cancel: threading.Event | None = None) -> dict:
    """Run every job in its own child, at most `parallel` at once, in list order; return name -> Outcome.
    Jobs that `on_phase` or `on_done` append to `jobs` while it runs are run too (work that can start once an
    earlier job has produced something). Never raises for what a job does: a crash, a limit or an exception is
    that job's Outcome. `cancel` is anything with is_set()."""
    ctx = _context()
    started = 0
    running: dict[str, _Running] = {}
    done: dict[str, Outcome] = {}
    try:
        while started < len(jobs) or running:
            while started < len(jobs) and len(running) < max(1, parallel):
                job = jobs[started]
                started += 1
                if cancel is not None and cancel.is_set():     # not started at all
                    done[job.name] = Outcome(job.name, False, error="cancelled", cause="cancelled")
                    if on_done:
                        on_done(done[job.name])
                    continue
                running[job.name] = _start(ctx, job)
            time.sleep(_POLL_S)
            for name in list(running):
                r = running[name]
                r.drain(on_phase)
                outcome = r.check(limits, cancelled=cancel is not None and cancel.is_set())
                if outcome is not None:
                    del running[name]
                    done[name] = outcome
                    if on_done:
                        on_done(outcome)
    finally:
        for r in running.values():   # the caller was interrupted: leave no child behind
            r.kill()
    return done


# ------------------------------------------------------------------------------------------------ parent ----
_CTX = None
_CTX_LOCK = threading.Lock()


def _context():
    global _CTX
    with _CTX_LOCK:
        if _CTX is None:
            # The forkserver's socket lives in multiprocessing's temp folder, chosen once per process: make it
            # the system's, not whatever tempfile.tempdir a caller pointed at a folder it later removes.
            import tempfile
            from multiprocessing import util
            saved, tempfile.tempdir = tempfile.tempdir, None
            try:
                util.get_temp_dir()
            finally:
                tempfile.tempdir = saved
            _no_main_reimport()
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["xc_core._preload"])
            _CTX = ctx
        return _CTX


PRELOAD_ENV = "XC_WORKER_PRELOAD"     # read by xc_core._preload in the forkserver


def preload_only(modules) -> None:
    """For a process that runs one analysis (the CLI): its worker forkserver, when it has not started yet, preloads
    the capture's libraries and these (the requested targets' `worker_modules`) rather than every target's."""
    with _CTX_LOCK:
        if _CTX is None:
            os.environ[PRELOAD_ENV] = ",".join(sorted(set(modules)))


def _no_main_reimport() -> None:
    """A child normally re-imports the parent's __main__ from its path first. Streamlit (and AppTest) set
    sys.modules["__main__"] to the page script being run, so a worker would re-run a dashboard page before its
    job. Workers need nothing from __main__ (their function is in an importable module): drop it from the
    preparation data of xc's own processes, and only theirs."""
    from multiprocessing import spawn
    original = spawn.get_preparation_data
    if getattr(original, "_xc", False):
        return

    def preparation_data(name):
        data = original(name)
        if str(name).startswith("xc-"):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data
    preparation_data._xc = True
    spawn.get_preparation_data = preparation_data


class _Running:
    def __init__(self, proc, conn, job: Job, stderr_path: str):
        self.proc, self.conn, self.job, self.stderr_path = proc, conn, job, stderr_path
        self.t0 = time.monotonic()
        self.phase: str | None = None
        self.phases: list[str] = []
        self.final: dict | None = None
        self.peak = 0
        self.rss = 0
        self._rss_at = self._children_at = 0.0
        self._proc = self._children = None

    def drain(self, on_phase: Events | None) -> None:
        try:
            while self.conn.poll():
                msg = json.loads(self.conn.recv_bytes())
                if "phase" in msg:
                    self.phase = msg["phase"]
                    self.phases.append(self.phase)
                    if on_phase:
                        on_phase(self.job.name, self.phase, msg.get("data"))
                else:
                    self.final = msg
        except (EOFError, OSError):
            pass

    def check(self, limits: WorkerLimits, cancelled: bool) -> Outcome | None:
        now = time.monotonic()
        elapsed = now - self.t0
        if now - self._rss_at >= _RSS_EVERY_S:
            self._rss_at = now
            self.rss = self._group_rss(now)
        rss = self.rss
        self.peak = max(self.peak, rss)
        reason = cause = None
        if cancelled:
            reason = cause = "cancelled"
        elif rss > limits.memory_gib * 2**30:
            cause = "limit"
            reason = f"exceeded the {limits.memory_gib:g} GiB memory limit{self._where()} (resident {rss / 2**30:.1f} GiB)"
        elif elapsed > limits.timeout_s:
            cause = "limit"
            reason = f"exceeded {limits.timeout_s:g} s{self._where()}"
        if reason is None and self.proc.is_alive():
            return None
        if reason is not None:
            self.kill()
        self.proc.join(5)
        self.drain(None)
        out = Outcome(self.job.name, False, phase=self.phase, seconds=round(elapsed, 3),
                      peak_rss_mib=round(self.peak / 2**20, 1), phases=self.phases, detail=self._stderr_tail())
        final = self.final or {}
        if reason is None and "value" in final:
            out.ok, out.value = True, final["value"]
        elif reason is None and "input_error" in final:
            out.input_error, out.cause = final["input_error"], "input"
            out.error = final["input_error"]["message"]
        elif reason is None and "exception" in final:
            out.error, out.cause = final["exception"], "exception"
            out.detail = final.get("traceback") or out.detail
        elif reason is not None:
            out.error, out.cause = reason, cause
        else:
            out.error = self._exit_reason()
            out.cause = "signal" if (self.proc.exitcode or 0) < 0 else "exit"
        self.conn.close()
        return out

    def _where(self) -> str:
        return f" in {self.phase}" if self.phase else ""

    def _exit_reason(self) -> str:
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"killed by {name}{self._where()}"
        return f"the worker exited with status {code}{self._where()} without a result"

    def _stderr_tail(self) -> str | None:
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4 * STDERR_TAIL))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return None
        # faulthandler ends a native crash's stack with the list of every extension module loaded (4 kB and more
        # with the toolchains imported): it says nothing about the crash and would push the stack out of the tail.
        text = _EXTENSION_MODULES.sub("", text).strip()
        return text[-STDERR_TAIL:] or None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            self.proc.kill()
        except (ProcessLookupError, OSError, AttributeError, ValueError):
            pass


    def _group_rss(self, now: float) -> int:
        """Resident bytes of the child and anything it started."""
        try:
            import psutil
            if self._proc is None:
                self._proc = psutil.Process(self.proc.pid)
            if self._children is None or now - self._children_at >= _CHILDREN_EVERY_S:
                self._children_at = now
                self._children = self._proc.children(recursive=True)
            total = self._proc.memory_info().rss
            for c in self._children:
                try:
                    total += c.memory_info().rss
                except psutil.Error:
                    pass
            return total
        except Exception:  # noqa: BLE001 — the child has just exited
            return 0


def _start(ctx, job: Job) -> _Running:
    os.makedirs(job.workdir, exist_ok=True)
    stderr_path = os.path.join(job.workdir, "stderr.log")
    recv, send = ctx.Pipe(duplex=False)
    # The parent gives the child its environment and decides on Landlock: the forkserver's own environment is
    # as old as the forkserver (XC_HOME, XC_LANDLOCK or thread settings may have changed since).
    env, abi = _job_environment(job.workdir), landlock_status()["abi"]
    with _clean_spawns():
        server = _forkserver_pid()
        proc = ctx.Process(target=_child_main, name=f"xc-{job.name}", daemon=True,
                           args=(job, send, stderr_path, env, abi, server))
        proc.start()
    send.close()
    return _Running(proc, recv, job, stderr_path)


def _forkserver_pid() -> int | None:
    """The forkserver's pid, starting it first if it is not running: the child it forks checks that its parent is
    still that process once it has asked to die with it (`_die_with_parent`)."""
    from multiprocessing import forkserver
    forkserver.ensure_running()
    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


# ------------------------------------------------------------------------------------------------- child ----
def _child_main(job: Job, conn, stderr_path: str, env: dict, landlock_abi: int, forkserver_pid: int | None) -> None:
    os.setsid()   # its own process group: a kill takes whatever it started too
    _die_with_parent(forkserver_pid)
    try:
        os.nice(WORKER_NICENESS)
    except OSError:
        pass
    try:
        fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        # The job folder is gone: the run that asked for this job was interrupted (Ctrl-C) between starting it and
        # learning its pid, and removed its scratch. Nobody waits for a result; say nothing on the CLI's stderr.
        os._exit(1)
    os.dup2(fd, 2)
    # A toolchain's native code prints to stdout too (TOSA's reference model warns there): into the same log, never
    # onto the CLI's stdout, which is the report's tables.
    os.dup2(fd, 1)
    os.close(fd)
    import faulthandler
    faulthandler.enable()   # a native crash leaves the Python stack in stderr.log
    from . import gc_policy
    gc_policy.apply()

    def phase(name: str, data=None) -> None:
        conn.send_bytes(json.dumps({"phase": name} if data is None else {"phase": name, "data": data},
                                   default=_json_default).encode())

    try:
        _confine(job, env, landlock_abi)
        import importlib
        for m in job.imports:
            importlib.import_module(m)
        module, fn = job.func.split(":")
        func = getattr(importlib.import_module(module), fn)
        profile_dir = os.environ.get("XC_PROFILE_DIR")
        if profile_dir:     # a bench's request: a cProfile file per job (bench/overhead.py --profile)
            import cProfile
            os.makedirs(profile_dir, exist_ok=True)
            prof = cProfile.Profile()
            try:
                value = prof.runcall(func, job.args, job.workdir, phase)
            finally:
                prof.dump_stats(os.path.join(profile_dir, f"{job.name}-{os.getpid()}.prof"))
        else:
            value = func(job.args, job.workdir, phase)
        conn.send_bytes(json.dumps({"value": value}, default=_json_default).encode())
    except XcInputError as e:
        conn.send_bytes(json.dumps({"input_error": {"message": str(e), "fix": e.fix,
                                                    "inputs": list(e.inputs or []),
                                                    "dashboard": e.dashboard}}).encode())
    except BaseException as e:  # noqa: BLE001 — anything else is this job's failure, reported as text
        from .errors import summarize_error
        conn.send_bytes(json.dumps({"exception": f"{type(e).__name__}: {summarize_error(str(e)) or type(e).__name__}",
                                    "traceback": traceback.format_exc(limit=8)}).encode())
    finally:
        conn.close()


_PR_SET_PDEATHSIG = 1


def _die_with_parent(forkserver_pid: int | None) -> None:
    """End this worker, and whatever it started, when its parent ends.

    A worker's parent is the forkserver, which exits when the process that started it is gone — the CLI however
    it ended (Ctrl-C, SIGTERM, kill -9, a crash) or the dashboard's server — once no worker holds a copy of its
    "alive" pipe: every forked child inherits one, which would keep the forkserver (and so its workers) running to
    the end of their jobs. The worker lets go of its copy and asks the kernel for SIGHUP when the forkserver exits
    (PR_SET_PDEATHSIG); SIGHUP then kills the worker's process group. A thread woken by the signal does it (the main
    thread may be deep in a runtime's native code, where a Python handler would wait), and the handler too. If the
    forkserver died before the request was in place, no signal would ever come: the worker ends at once."""
    from multiprocessing import forkserver
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGHUP, lambda signum, frame: _kill_own_group())
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)     # the C-level handler writes each signal's number
    threading.Thread(target=_on_hangup, args=(wake_r,), name="xc-parent-watch", daemon=True).start()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGHUP), ctypes.c_ulong(0),
                   ctypes.c_ulong(0), ctypes.c_ulong(0))
    except (OSError, AttributeError):       # no prctl (not Linux): the worker ends with its job, or its limit
        return
    if forkserver_pid is not None and os.getppid() != forkserver_pid:
        _kill_own_group()
    server = getattr(forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
        server._forkserver_alive_fd = None      # a worker that uses multiprocessing starts a forkserver of its own


def _on_hangup(wake_r: int) -> None:
    while True:
        got = os.read(wake_r, 64)
        if not got or signal.SIGHUP in got:
            _kill_own_group()


def _kill_own_group() -> None:
    """SIGKILL to the worker's process group (it leads one since setsid, so never the group of the process that
    started it), the worker included."""
    if os.getpgrp() == os.getpid():
        with contextlib.suppress(OSError):
            os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(1)


def _json_default(o):
    import numpy as np
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"{type(o).__name__} does not cross the worker boundary; write it to a file")


# ------------------------------------------------------------------------------------------- confinement ----
# What a worker keeps of its parent's environment: what the toolchains read. Everything else (cloud credentials,
# CI tokens, a Hugging Face token, passwords) stays behind.
_ENV_KEEP = {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "PYTHONPATH", "PYTHONHASHSEED",
             "PYTHONFAULTHANDLER", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "CC", "CXX", "CPATH", "LIBRARY_PATH",
             "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "SOURCE_DATE_EPOCH"}
_ENV_KEEP_PREFIXES = ("LC_", "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "DNNL_", "ONEDNN_", "TBB_", "OV_", "ORT_",
                      "TORCH_", "TORCHINDUCTOR_", "XC_")
# Dropped even when allowed above: a name that says it holds a credential.
_ENV_SECRET = re.compile(r"TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE|AUTH|COOKIE|"
                         r"SESSION|(^|_)KEY($|_)", re.IGNORECASE)


def worker_environment(environ: dict, workdir: str | None) -> dict:
    """The environment a worker runs with: the allow-listed part of `environ`, with HOME and the temp folders
    inside its job folder (`workdir`; None for the forkserver, which keeps them as they are)."""
    env = {k: v for k, v in environ.items()
           if (k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)) and not _ENV_SECRET.search(k)}
    if workdir is None:
        env.update({k: environ[k] for k in ("HOME", "TMPDIR", "TEMP", "TMP") if k in environ})
    else:
        tmp = os.path.join(workdir, "tmp")
        env.update(HOME=os.path.join(workdir, "home"), TMPDIR=tmp, TEMP=tmp, TMP=tmp)
    return env


_SPAWN_LOCK = threading.Lock()
_SPAWNED: list = []


@contextlib.contextmanager
def _clean_spawns():
    """While a worker starts: when multiprocessing has to launch its forkserver (the first time, or after it died)
    and resource tracker, they start with the allow-listed environment, so no credential of this process is ever
    in a worker's memory or its /proc/PID/environ (cleaning os.environ in the child would leave both)."""
    from multiprocessing import util

    def spawn(path, args, passfds):
        import subprocess
        # In a session of its own: a Ctrl-C at the terminal goes to the CLI's process group, and the forkserver,
        # importing torch for seconds before it ignores SIGINT, would print a traceback of its own.
        p = subprocess.Popen(list(args), executable=path, pass_fds=tuple(sorted(map(int, passfds))), close_fds=True,
                             env=_job_environment(None), restore_signals=False, start_new_session=True)
        _SPAWNED.append(p)   # multiprocessing waits for this pid itself: a dropped Popen would let subprocess reap it
        return p.pid
    with _SPAWN_LOCK:
        original, util.spawnv_passfds = util.spawnv_passfds, spawn
        try:
            yield
        finally:
            util.spawnv_passfds = original


def _job_environment(workdir: str | None) -> dict:
    """worker_environment of this process's environment, with xc's data folder pinned: with HOME moved into the job
    folder, a default XC_HOME (the user data dir, found from HOME) would move with it."""
    from .paths import home
    return {**worker_environment(dict(os.environ), workdir), "XC_HOME": home()}


def _confine(job: Job, env: dict, landlock_abi: int) -> None:
    """Before the job: the environment `env` (worker_environment's), home and temp inside the job folder, and
    (Landlock) no writes outside the folders the job may write. Raises when Landlock is there but could not be
    applied: a worker that should be confined does not run unconfined."""
    import tempfile
    for d in (env["HOME"], env["TMPDIR"]):
        os.makedirs(d, exist_ok=True)
    os.environ.clear()      # unsetenv for each, so programs the worker starts (g++) inherit only `env`
    os.environ.update(env)
    tempfile.tempdir = env["TMPDIR"]      # tempfile caches its folder: torch had asked it already, in the forkserver
    import sys
    sys.dont_write_bytecode = True        # nothing to write into the installation's __pycache__ (refused anyway)
    if landlock_abi:
        from .peak_memory import keep_reset_open
        keep_reset_open()       # before Landlock refuses it: the cost block's phase peaks (peak_memory.py)
        profiles = env.get("XC_PROFILE_DIR")     # a bench's cProfile files (see _child_main)
        try:
            _landlock((job.workdir, *job.writable, *([profiles] if profiles else [])), landlock_abi)
        except OSError as e:
            raise RuntimeError(f"the worker could not be confined with Landlock ({e.strerror or e}); set "
                               "XC_LANDLOCK=0 to run workers without it") from None


# Landlock's interface (include/uapi/linux/landlock.h): three system calls, numbered alike on every architecture.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_FS_WRITE_FILE, _FS_TRUNCATE, _FS_REFER = 1 << 1, 1 << 14, 1 << 13
_FS_MAKE = sum(1 << i for i in range(4, 13))   # remove dir/file, make char/dir/reg/sock/fifo/block/sym
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2                      # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2           # ABI 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1      # packed in the kernel's header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_LANDLOCK: dict | None = None


def confinement() -> dict:
    """What confines a worker on this host, in words (the report's run.confinement)."""
    ll = landlock_status()
    out = {"environment": "allow-list (no credentials)", "home_and_temp": "inside the job folder"}
    if ll["abi"]:
        out["landlock_abi"] = ll["abi"]
        out["writes"] = "only beneath the run folder (and the Inductor cache for Inductor), /dev/null"
        if ll["abi"] >= 4:
            out["tcp"] = "bind and connect refused"
        if ll["abi"] >= 6:
            out["scope"] = "no signals or abstract-socket connections to processes outside"
    else:
        out["writes"] = f"not confined: {ll['why']}"
    return out


def landlock_status() -> dict:
    """{"abi": the kernel's Landlock ABI version or 0, "why": why not, when 0}. Asking is harmless (it restricts
    nothing); XC_LANDLOCK=0 says no."""
    global _LANDLOCK
    if os.environ.get("XC_LANDLOCK", "1").strip().lower() in ("0", "false", "no", "off"):
        return {"abi": 0, "why": "turned off (XC_LANDLOCK=0)"}
    if _LANDLOCK is None:
        import sys
        if not sys.platform.startswith("linux"):
            _LANDLOCK = {"abi": 0, "why": f"Landlock is Linux's; this is {sys.platform}"}
        else:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.syscall.restype = ctypes.c_long
                abi = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                                   ctypes.c_uint32(_CREATE_RULESET_VERSION))
                err = ctypes.get_errno()
            except (OSError, AttributeError) as e:
                abi, err = -1, 0
                _LANDLOCK = {"abi": 0, "why": f"no system call interface ({e})"}
            if _LANDLOCK is None:
                why = f"this kernel has no Landlock ({os.strerror(err) if err else 'no ABI'})"
                _LANDLOCK = {"abi": int(abi), "why": None} if abi > 0 else {"abi": 0, "why": why}
    return dict(_LANDLOCK)


def _landlock(writable, abi: int) -> None:
    """Allow writes only beneath `writable` (and to /dev/null) for this process and everything it starts; refuse TCP
    and (ABI 6) signals and abstract sockets to processes outside. Irreversible."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def call(*args) -> int:
        ret = libc.syscall(*args)
        if ret < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"Landlock: {os.strerror(err)}")
        return ret
    handled = _FS_WRITE_FILE | _FS_MAKE | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    attr = _RulesetAttr(handled, (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0,
                        (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    # An older kernel reads a shorter struct (and refuses fields it does not know): pass only what it knows.
    size = 8 if abi < 4 else 16 if abi < 6 else ctypes.sizeof(_RulesetAttr)
    ruleset = call(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        file_rights = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
        rules = [(p, handled) for p in dict.fromkeys(os.path.abspath(w) for w in writable if w)]
        rules.append((os.devnull, file_rights))
        for path, rights in rules:
            if rights == handled:
                os.makedirs(path, exist_ok=True)
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneathAttr(rights, fd)
                call(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                     ctypes.byref(rule), ctypes.c_uint32(0))
            finally:
                os.close(fd)
        libc.prctl.restype = ctypes.c_int
        if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0)) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        call(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
