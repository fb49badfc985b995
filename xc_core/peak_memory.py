"""This process's resident size and the kernel's record of its peak (Linux /proc), for the cost block's phase
peaks (targets/run_cost.py). No imports beyond the standard library: a worker calls `keep_reset_open` before it
confines itself.

Writing "5" to /proc/self/clear_refs resets the kernel's peak resident size (VmHWM) to the current one (Linux 4.0+,
Documentation/filesystems/proc.rst). Landlock refuses to open that file once a worker is confined (it allows writes
only beneath the job's folders, and a rule on a /proc file does not hold: its inode is made anew at each lookup), so
a worker opens it before, and keeps the descriptor: Landlock checks the open, not the writes.
"""
from __future__ import annotations

import os

_CLEAR_REFS = "/proc/self/clear_refs"
_kept_fd: int | None = None


def status_bytes(key: str) -> int | None:
    """VmRSS / VmHWM of this process, in bytes (None where /proc does not say)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def keep_reset_open() -> None:
    """Open this process's clear_refs for writing and keep it (a worker, before Landlock); a failure leaves the
    resets to `reset_peak`'s own open, and the cost block to its sampling fallback."""
    global _kept_fd
    if _kept_fd is None:
        try:
            _kept_fd = os.open(_CLEAR_REFS, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            _kept_fd = None


def reset_peak() -> str | None:
    """Reset the kernel's peak resident size of this process to its current size: None when done, else why not."""
    try:
        if _kept_fd is not None:
            os.write(_kept_fd, b"5")
        else:
            with open(_CLEAR_REFS, "w") as f:
                f.write("5")
        return None
    except OSError as e:
        return f"{_CLEAR_REFS} refused ({e.strerror or type(e).__name__})"
