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
