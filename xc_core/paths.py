"""Where xc keeps things, and writing them safely: $XC_HOME, scratch folders named by their process (swept when
the process is gone), and atomic writes (a temporary name, then a rename) so no reader sees half a file."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import uuid


def home() -> str:
    """xc's data folder: $XC_HOME, else the platform's user data dir."""
    explicit = os.environ.get("XC_HOME")
    if explicit:
        return os.path.abspath(explicit)
    import platformdirs
    return platformdirs.user_data_dir("xc", appauthor=False)


def scratch_dir(prefix: str) -> str:
    """A new scratch folder under $XC_HOME/work, named by this process so a crash's leftovers can be swept."""
    root = os.path.join(home(), "work")
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:10]}")
    os.makedirs(path)
    return path


def sweep_scratch() -> int:
    """Remove scratch folders whose process is gone (a crash, a kill, a restart). Returns how many."""
    root = os.path.join(home(), "work")
    removed = 0
    for name in list_folder(root):        # a folder that is missing or cannot be read: nothing to sweep
        parts = name.split("-")
        pid = int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None
        if pid is not None and pid != os.getpid() and not _alive(pid):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            removed += 1
    return removed


WORK_DIR = "work"           # a run folder's worker job folders, removed when the run ends
_WORK_OWNER = ".owner"      # in it: "PID START-TIME" of the process whose run it is


def claim_work_dir(run_dir: str) -> str:
    """run_dir/work for this process's run, with its owner written in it. One left by a run that was killed before
    it could remove it (kill -9, a lost machine) is removed first (`sweep_stale_work`); one a live run is using is
    refused in one line, since two runs in one folder would write over each other's job folders."""
    from .errors import XcInputError, printable_line
    work = os.path.join(run_dir, WORK_DIR)
    owner = sweep_stale_work(run_dir)
    if owner is not None:
        raise XcInputError(f"{printable_line(run_dir)}: another xc run (process {owner}) is writing into this folder "
                           "— wait for it to finish, or write elsewhere")
    os.makedirs(work, exist_ok=True)
    write_text_atomic(os.path.join(work, _WORK_OWNER), _process_identity(os.getpid()) or str(os.getpid()))
    return work


def sweep_stale_work(run_dir: str) -> int | None:
    """Remove run_dir/work when the run that made it is gone (or unknown: an older xc wrote no owner). Returns the
    pid of the live process whose it is, else None."""
    work = os.path.join(run_dir, WORK_DIR)
    if not os.path.isdir(work):
        return None
    try:
        with open(os.path.join(work, _WORK_OWNER)) as f:
            owner = f.read().strip()
    except OSError:
        owner = ""
    pid = owner.split()[0] if owner else ""
    if pid.isdigit() and _process_identity(int(pid)) == owner:
        return int(pid)
    shutil.rmtree(work, ignore_errors=True)
    return None


def _process_identity(pid: int) -> str | None:
    """"PID START-TIME" of a live process (the start time tells it from a later process given the same pid), or
    None when there is no such process."""
    import psutil
    try:
        return f"{pid} {psutil.Process(pid).create_time():.3f}"
    except psutil.Error:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def write_json_atomic(path: str, data) -> None:
    # One compact json.dumps: json.dump streams through the pure-Python encoder, several times slower on the
    # megabytes of a big model's report, and indenting adds a third to the size.
    write_text_atomic(path, json.dumps(data, separators=(",", ":")))


def write_text_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_bytes_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)



def list_folder(path: str) -> list[str]:
    """A folder's names; none when it is missing or cannot be read."""
    try:
        return os.listdir(path)
    except OSError:
        return []


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
