"""Python's garbage collector, tuned for xc's graph work.

Converting and reading back a big graph builds a large, long-lived heap (coremltools' MIL program of an LSTM
unrolled to 60,000 ops, xc's graphs of it) while allocating millions of short-lived objects. With the default
thresholds (700, 10, 10) the collector keeps walking that whole heap: measured with bench/scaling.py's LSTM over
160 steps (Core ML fp32 and ORT, in one process, side by side), 57.8 s with the defaults against 50.6 s with
THRESHOLDS (compile 46.0 → 41.9 s, inspect 2.0 → 1.3 s, report 4.2 → 2.7 s), peak RSS 733 → 753 MB; with the
collector off, 50.1 s and 785 MB. Fewer collections, not none: the passes free cyclic garbage (MIL ops and vars
point at each other) that must still be collected.
"""
from __future__ import annotations

import contextlib
import gc
import threading

THRESHOLDS = (20_000, 50, 100)

_lock = threading.Lock()
_depth = 0
_saved: tuple | None = None


def apply() -> None:
    """For a process that does nothing else (a worker): the thresholds for its whole life."""
    gc.set_threshold(*THRESHOLDS)


@contextlib.contextmanager
def fewer_collections():
    """THRESHOLDS while the block runs (an analysis in this process), the caller's own settings after; nested
    and concurrent blocks restore them once the last one ends."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*THRESHOLDS)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                gc.set_threshold(*_saved)
