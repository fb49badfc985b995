"""Runs that persist: an embedded store of every analysis (report, inputs, artifacts) under xc's data folder.

    $XC_HOME (default: the user data dir, e.g. ~/.local/share/xc)
      runs.sqlite       one row per run: key, when, size, source, targets, and a manifest path -> content hash
      objects/ab/abcd…  every file of every run, stored once by its sha256 (a re-run shares unchanged files)
      work/             scratch folders of runs in progress (named by pid; a dead pid's folder is swept)

A run is committed in one SQLite transaction after all its objects are written (each to a temporary name, then
renamed), so an analysis interrupted by a crash or a restart leaves no half record — at most unreferenced objects,
which the next eviction removes. The store is bounded: beyond `XC_STORE_MB` (default 4096) the least recently used
runs are evicted.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import threading
import time
import uuid

DEFAULT_STORE_MB = 4096
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    created REAL NOT NULL,
    last_used REAL NOT NULL,
    bytes INTEGER NOT NULL,
    source_name TEXT, source_sha256 TEXT, targets TEXT, status TEXT,
    manifest TEXT NOT NULL,
    summary TEXT
);
"""
REPORT_FILE = "report.json"


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
    if not os.path.isdir(root):
        return 0
    for name in os.listdir(root):
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
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def run_key(**parts) -> str:
    """A run's identity: everything that changes its result (source content, inputs, targets, options, edits,
    limits, xc's version)."""
    from . import __version__
    text = json.dumps({**parts, "xc_version": __version__}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def run_summary(report: dict, origin: str) -> dict:
    """What the history lists without opening the report: where it came from, targets by status, verdicts."""
    statuses = [t["status"] for t in (report.get("targets") or {}).values()]
    verdicts: dict[str, int] = {}
    for items in ((report.get("checklist") or {}).get("targets") or {}).values():
        for i in items:
            verdicts[i["verdict"]] = verdicts.get(i["verdict"], 0) + 1
    return {"origin": origin, "kind": (report.get("source") or {}).get("kind"),
            "ok": statuses.count("ok"), "error": statuses.count("error"),
            "unavailable": statuses.count("unavailable"), "verdicts": verdicts}


class RunStore:
    """Thread-safe within a process (one lock), safe across processes (SQLite's own locking, WAL)."""

    def __init__(self, root: str | None = None, max_mb: float | None = None):
        self.root = os.path.abspath(root or home())
        self.max_bytes = int((max_mb if max_mb is not None else
                              float(os.environ.get("XC_STORE_MB", DEFAULT_STORE_MB))) * (1 << 20))
        os.makedirs(os.path.join(self.root, "objects"), exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(os.path.join(self.root, "runs.sqlite"), timeout=30, check_same_thread=False,
                                   isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL syncs at checkpoints, not at every commit: a page opening a run (which marks it used)
        # must not wait for a disk flush (0.1–0.3 s here). A crash may lose the last "used" marks, not runs.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}
        if "summary" not in columns:     # a store written before run summaries existed
            self._db.execute("ALTER TABLE runs ADD COLUMN summary TEXT")

    # -- reading ----------------------------------------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        """The run's report (its sidecar's lists attached), or None. Marks the run as used (eviction is
        least-recently-used)."""
        from .report.sidecar import SIDECAR_FILE, attach
        manifest = self._manifest(key)
        if manifest is None or REPORT_FILE not in manifest:
            return None

        def read_sidecar():
            if SIDECAR_FILE not in manifest:
                return None
            with open(self._object(manifest[SIDECAR_FILE])) as f:
                return f.read()
        try:
            with open(self._object(manifest[REPORT_FILE])) as f:
                report = attach(json.load(f), read_sidecar)
        except (OSError, ValueError):        # a missing sidecar is a ValueError too: the run is unreadable
            return None
        with self._lock:
            self._db.execute("UPDATE runs SET last_used=? WHERE key=?", (time.time(), key))
        return report

    def has(self, key: str) -> bool:
        return self._manifest(key) is not None

    def files(self, key: str) -> dict[str, str]:
        """Relative path in the run -> the stored file (for downloads)."""
        manifest = self._manifest(key) or {}
        return {rel: self._object(h) for rel, h in manifest.items()}

    def materialize(self, key: str, dest: str) -> str:
        """Copy a run's files back into a folder laid out as the run was (report.json, inputs.npz, artifacts/)."""
        for rel, path in self.files(key).items():
            target = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(path, target)
        return dest

    def runs(self) -> list[dict]:
        """Every run, newest first: key, created, last_used, bytes, source_name, source_sha256, targets, status
        and summary (origin, targets ok / failed, checklist verdict counts)."""
        with self._lock:
            rows = self._db.execute("SELECT key, created, last_used, bytes, source_name, source_sha256, targets, "
                                    "status, summary FROM runs ORDER BY created DESC").fetchall()
        cols = ("key", "created", "last_used", "bytes", "source_name", "source_sha256", "targets", "status",
                "summary")
        out = [dict(zip(cols, r)) for r in rows]
        for r in out:
            r["summary"] = json.loads(r["summary"]) if r["summary"] else {}
        return out

    def total_bytes(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COALESCE(SUM(bytes), 0) FROM runs").fetchone()[0])

    # -- writing ----------------------------------------------------------------------------------------------
    def put(self, key: str, report: dict, run_dir: str | None = None, origin: str = "cli") -> None:
        """Store the report and every file of run_dir (its inputs, capture, artifacts), then commit the run.
        `origin`: where it came from (the CLI, the dashboard, or a report.json imported without its files)."""
        manifest: dict[str, str] = {}
        size = 0
        if run_dir and os.path.isdir(run_dir):
            for folder, dirs, files in os.walk(run_dir):
                dirs[:] = [d for d in dirs if not (folder == run_dir and d == "work")]
                for name in files:
                    path = os.path.join(folder, name)
                    if os.path.islink(path) or not os.path.isfile(path):
                        continue
                    rel = os.path.relpath(path, run_dir)
                    manifest[rel], n = self._add_file(path)
                    size += n
        from .report.sidecar import SIDECAR_FILE, dumps
        text, side = dumps(report)
        for name in (REPORT_FILE, SIDECAR_FILE):
            manifest.pop(name, None)      # the report given wins over a report.json in run_dir
        manifest[REPORT_FILE], n = self._add_bytes(text.encode())
        size += n
        if side is not None:
            manifest[SIDECAR_FILE], n = self._add_bytes(side.encode())
            size += n
        src = report.get("source") or {}
        status = ",".join(sorted({t["status"] for t in (report.get("targets") or {}).values()}))
        now = time.time()
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
                             (key, now, now, size, src.get("name"), src.get("sha256"),
                              ",".join(report.get("targets") or {}), status, json.dumps(manifest),
                              json.dumps(run_summary(report, origin))))
        self.evict()

    def delete(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM runs WHERE key=?", (key,))
        self._collect()

    def evict(self) -> list[str]:
        """Drop least-recently-used runs until the store fits its bound; then remove unreferenced objects."""
        dropped = []
        with self._lock:
            total = int(self._db.execute("SELECT COALESCE(SUM(bytes), 0) FROM runs").fetchone()[0])
            if total > self.max_bytes:
                for key, n in self._db.execute("SELECT key, bytes FROM runs ORDER BY last_used ASC").fetchall():
                    if total <= self.max_bytes:
                        break
                    self._db.execute("DELETE FROM runs WHERE key=?", (key,))
                    total -= n
                    dropped.append(key)
        if dropped:
            self._collect()
        return dropped

    def _collect(self) -> None:
        with self._lock:
            live = set()
            for (m,) in self._db.execute("SELECT manifest FROM runs").fetchall():
                live.update(json.loads(m).values())
        objects = os.path.join(self.root, "objects")
        cutoff = time.time() - 60   # an object younger than this may belong to a run being committed now
        for sub in os.listdir(objects):
            for name in os.listdir(os.path.join(objects, sub)):
                path = os.path.join(objects, sub, name)
                if name not in live and os.path.getmtime(path) < cutoff:
                    os.remove(path)

    # -- objects ----------------------------------------------------------------------------------------------
    def _object(self, digest: str) -> str:
        return os.path.join(self.root, "objects", digest[:2], digest)

    def _add_file(self, path: str) -> tuple[str, int]:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest = h.hexdigest()
        dest = self._object(digest)
        if not os.path.exists(dest):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            tmp = f"{dest}.tmp-{os.getpid()}-{threading.get_ident()}"
            shutil.copyfile(path, tmp)
            os.replace(tmp, dest)
        else:
            os.utime(dest)
        return digest, os.path.getsize(path)

    def _add_bytes(self, data: bytes) -> tuple[str, int]:
        digest = hashlib.sha256(data).hexdigest()
        dest = self._object(digest)
        if not os.path.exists(dest):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            tmp = f"{dest}.tmp-{os.getpid()}-{threading.get_ident()}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, dest)
        return digest, len(data)

    def _manifest(self, key: str) -> dict | None:
        with self._lock:
            row = self._db.execute("SELECT manifest FROM runs WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None
