"""The CLI process's own memory bound.

`--memory` bounds each worker process; the CLI's main process reads manifests, matrices and reports itself, and an
input that expands without end (a YAML of nested aliases, a crafted matrix) must not take the machine with it. A
watchdog thread reads this process's resident memory a few times a second; past the bound it says so in one line
on stderr, stops this process's own child processes and exits 2 (no traceback: the main thread may be deep in a
parser and is not unwound).

Resident memory, not address space: RLIMIT_AS would also count what torch and the runtimes map and never touch
(tens of GiB of address space for a few hundred MiB used), and would fail normal runs. The default, 8 GiB, is far
above what the CLI itself uses (well under 2 GiB in a batch of realistic models: the compilers run in workers).
"""
from __future__ import annotations

import os
import threading
import time

from .errors import XcInputError

ENV = "XC_MAIN_MEMORY_GIB"
DEFAULT_GIB = 8.0
CHECK_EVERY_S = 0.25
EXIT_CODE = 2

_lock = threading.Lock()
_bound = {"bytes": 0}
_thread: threading.Thread | None = None


def bound_bytes() -> int:
    """The bound from XC_MAIN_MEMORY_GIB (default 8 GiB); XcInputError for a value that is not a size."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return int(DEFAULT_GIB * (1 << 30))
    try:
        gib = float(raw)
    except ValueError:
        gib = -1.0
    if not 0 < gib < 1 << 20:
        from .errors import printable_line
        raise XcInputError(f"{ENV}={printable_line(raw)[:40]}: expected the CLI process's memory bound in GiB, a "
                           f"number above 0 (default {DEFAULT_GIB:g})")
    return int(gib * (1 << 30))


def install() -> None:
    """Start the watchdog (once per process; a later call takes the environment's bound again)."""
    global _thread
    limit = bound_bytes()
    with _lock:
        _bound["bytes"] = limit
        if _thread is not None and _thread.is_alive():
            return
        _thread = threading.Thread(target=_watch, name="xc-memory-guard", daemon=True)
        _thread.start()


def _watch() -> None:
    import psutil
    me = psutil.Process()
    while True:
        try:
            rss = me.memory_info().rss
        except psutil.Error:
            return          # this process's own figures are not readable here: no guard rather than a false one
        if rss > _bound["bytes"]:
            _stop(rss, _bound["bytes"], me)
        time.sleep(CHECK_EVERY_S)


def _stop(rss: int, limit: int, me) -> None:
    """One line, this process's children stopped (workers, their forkserver), exit 2. Written to the descriptor
    directly: the main thread may hold sys.stderr's lock."""
    import psutil
    line = (f"xc: this process passed its memory bound of {limit / 2**30:g} GiB (resident {rss / 2**30:.1f} GiB) "
            f"— an input that expands without end? Raise the bound with {ENV}=N if it is a real workload\n")
    try:
        os.write(2, line.encode("utf-8", "replace"))
    except OSError:
        pass
    try:
        for child in me.children(recursive=True):
            try:
                child.kill()
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    os._exit(EXIT_CODE)
