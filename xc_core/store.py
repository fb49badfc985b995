"""Runs that persist: an embedded store of every analysis (report, inputs, artifacts) under xc's data folder.

    $XC_HOME (default: the user data dir, e.g. ~/.local/share/xc)
      runs.sqlite       the index: one row per run: key, when, size, source, targets, who started it (a dashboard
                        with sign-in), and a manifest path -> hash
      records/<key>.json  the same row as JSON, one file per run: what the index is rebuilt from
      objects/ab/abcd…  every file of every run, stored once by its sha256 (a re-run shares unchanged files)
      fleets/<id>.json  the matrices `xc batch` wrote (their cells are runs of this store), for the Fleet page
      work/             scratch folders of runs in progress (named by pid; a dead pid's folder is swept)

A run is committed in one SQLite transaction after all its objects and its record are written (each to a temporary
name, then renamed), so an analysis interrupted by a crash or a restart leaves no half record — at most
unreferenced objects, which the next eviction removes. The store is bounded: beyond `XC_STORE_MB` (default 4096)
the least recently used runs are evicted.

The index is only an index. When it is damaged (a truncated file, garbage, another program's database — checked
when the store opens, and whenever SQLite reports corruption later) it is moved aside and rebuilt from the records;
a store written before records existed gets back the reports found among its objects (without their other files).
Either is said in one line. When it cannot be opened at all (permissions, a lock held elsewhere, a folder that
cannot be written) the store is unavailable: reads find nothing, `put` raises StoreUnavailable with the one line,
and xc carries on without keeping runs.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import sys
import threading
import time
import uuid

from .paths import home, list_folder, write_json_atomic
# run_key is the key recipe's (run_keys.py); named here too, where runs are stored and looked up by it.
from .run_keys import reusable_cells, run_key  # noqa: F401

DEFAULT_STORE_MB = 4096
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    key TEXT PRIMARY KEY,
    created REAL NOT NULL,
    last_used REAL NOT NULL,
    bytes INTEGER NOT NULL,
    source_name TEXT, source_sha256 TEXT, targets TEXT, status TEXT,
    manifest TEXT NOT NULL,
    summary TEXT,
    user TEXT
);
"""
REPORT_FILE = "report.json"
INDEX_FILE, RECORDS_DIR, OBJECTS_DIR, FLEETS_DIR = "runs.sqlite", "records", "objects", "fleets"
_COLUMNS = ("key", "created", "last_used", "bytes", "source_name", "source_sha256", "targets", "status", "manifest",
            "summary", "user")
# A report object bigger than this is not parsed when recovering a store without records (memory, not taste).
MAX_RECOVER_BYTES = 512 << 20


def run_summary(report: dict, origin: str) -> dict:
    """What the history lists without opening the report: where it came from, targets by status, verdicts."""
    statuses = [t["status"] for t in (report.get("targets") or {}).values()]
    verdicts: dict[str, int] = {}
    for items in ((report.get("checklist") or {}).get("targets") or {}).values():
        for i in items:
            verdicts[i["verdict"]] = verdicts.get(i["verdict"], 0) + 1
    summary = {"origin": origin, "kind": (report.get("source") or {}).get("kind"),
               "ok": statuses.count("ok"), "error": statuses.count("error"),
               "unavailable": statuses.count("unavailable"), "verdicts": verdicts}
    cell_keys = reusable_cells(report)
    if cell_keys:
        # Every run answers for each of its targets alone too (run_keys.py): listed here, a batch or `--reuse`
        # finds the cells it can take without opening every report.
        summary["cell_keys"] = cell_keys
    return summary


class StoreUnavailable(OSError):
    """The run store cannot be used here (its index cannot be opened or written); str() is the one line saying why
    and what to do."""


_SAID: set[str] = set()
_SAID_LOCK = threading.Lock()


def say_once(line: str) -> None:
    """One line on stderr (the CLI's terminal, the dashboard server's log), at most once per process."""
    with _SAID_LOCK:
        if line in _SAID:
            return
        _SAID.add(line)
    print(f"xc: {line}", file=sys.stderr, flush=True)


class _Damaged(Exception):
    """The index file is not a usable run index; the argument says how, in a few words."""


_CORRUPT = (11, 26)     # SQLITE_CORRUPT, SQLITE_NOTADB: the file's content is wrong, not its permissions or locks
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SAFE_KEY = re.compile(r"[0-9A-Za-z_-]{1,100}")


def _is_damage(e: sqlite3.DatabaseError) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _CORRUPT
    return not isinstance(e, sqlite3.OperationalError)   # before Python 3.11 corruption is a bare DatabaseError


def _words(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0][:160] if text else "") or type(e).__name__


def _opening(root: str):
    """Processes opening (and perhaps repairing) one store's index take turns, so a damaged index is moved aside
    once, not once per process."""
    return _flocked(os.path.join(root, ".index.lock"))


@contextlib.contextmanager
def _flocked(path: str):
    """An exclusive flock on `path` while the block runs (threads too: each opens its own descriptor)."""
    try:
        import fcntl
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except (ImportError, OSError):     # no flock on this platform, or a folder that cannot be written: opening says
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)                   # closing the descriptor releases the lock


class RunStore:
    """Thread-safe within a process (one lock), safe across processes (SQLite's own locking, WAL)."""

    def __init__(self, root: str | None = None, max_mb: float | None = None):
        self.root = os.path.abspath(root or home())
        self.max_bytes = int((max_mb if max_mb is not None else
                              float(os.environ.get("XC_STORE_MB", DEFAULT_STORE_MB))) * (1 << 20))
        self.index_path = os.path.join(self.root, INDEX_FILE)
        self.problem: str | None = None    # why the store is unavailable, in one line; None while it works
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._ino: int | None = None
        try:
            os.makedirs(os.path.join(self.root, OBJECTS_DIR), exist_ok=True)
        except OSError as e:
            self.problem = (f"the run store at {self.root} cannot be created ({e.strerror or e}); runs are not kept "
                            "— set XC_HOME to a folder xc can write")
            return
        with self._lock, _opening(self.root):
            self._open()

    @property
    def available(self) -> bool:
        return self._db is not None

    # -- reading ----------------------------------------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        """The run's report (its sidecar's lists attached), or None. Marks the run as used (eviction is
        least-recently-used). A run whose report is gone from objects/ leaves the store."""
        from .report.sidecar import attach, sidecar_in
        manifest = self._manifest(key)
        if manifest is None or REPORT_FILE not in manifest:
            return None
        if not self._complete(key, manifest):
            return None

        def read_sidecar():
            name = sidecar_in(manifest)
            if name is None:
                return None
            with open(self._object(manifest[name]), "rb") as f:
                return f.read()
        try:
            with open(self._object(manifest[REPORT_FILE])) as f:
                report = attach(json.load(f), read_sidecar)
        except (OSError, ValueError):        # a missing sidecar is a ValueError too: the run is unreadable
            return None
        self._sql(lambda db: db.execute("UPDATE runs SET last_used=? WHERE key=?", (time.time(), key)))
        return report

    def has(self, key: str) -> bool:
        manifest = self._manifest(key)
        return manifest is not None and self._complete(key, manifest)

    def files(self, key: str) -> dict[str, str]:
        """Relative path in the run -> the stored file (for downloads); files gone from objects/ are left out."""
        manifest = self._manifest(key) or {}
        paths = {rel: self._object(h) for rel, h in manifest.items()}
        return {rel: p for rel, p in paths.items() if os.path.isfile(p)}

    def updating(self, key: str):
        """Held while a stored run is read, extended and put back under its key (isolation from two dashboard
        sessions): whoever comes second reads the run the first put back, so neither's additions are lost."""
        folder = os.path.join(self.root, "locks")
        os.makedirs(folder, exist_ok=True)
        return _flocked(os.path.join(folder, f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.lock"))

    def materialize(self, key: str, dest: str) -> str:
        """Copy a run's files back into a folder laid out as the run was (report.json, inputs.npz, artifacts/)."""
        for rel, path in self.files(key).items():
            target = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(path, target)
        return dest

    def runs(self) -> list[dict]:
        """Every run, newest first: key, created, last_used, bytes, source_name, source_sha256, targets, status,
        summary (origin, targets ok / failed, checklist verdict counts) and user (who started it on a dashboard
        that requires sign-in; None for the CLI, an open dashboard, or a run stored before users were recorded). A
        run whose report is gone from objects/ leaves the store here."""
        cols = ("key", "created", "last_used", "bytes", "source_name", "source_sha256", "targets", "status",
                "summary", "user")
        from .report.sidecar import SIDECAR_FILE
        rows = self._sql(lambda db: _select_with_report(db, cols), default=[])
        out = []
        for r in rows:
            needed = {REPORT_FILE: r[-2], **({SIDECAR_FILE: r[-1]} if r[-1] else {})}
            if not self._complete(r[0], needed):
                continue
            d = dict(zip(cols, r[:-2]))
            summary = _loads(d["summary"], {}) if d["summary"] else {}
            d["summary"] = summary if isinstance(summary, dict) else {}
            out.append(d)
        return out

    def run_with_cells(self, cells: dict[str, str]) -> str | None:
        """The newest stored run made of exactly these cells (identity → cell key, run_keys.py), whoever made it and
        under whatever worker limits; None when there is none. Runs from before cell keys list none: never found."""
        wanted = dict(cells)
        for r in self.runs():                # newest first
            if (r.get("summary") or {}).get("cell_keys") == wanted:
                return r["key"]
        return None

    def total_bytes(self) -> int:
        return int(self._sql(lambda db: db.execute("SELECT COALESCE(SUM(bytes), 0) FROM runs").fetchone()[0],
                             default=0))

    # -- fleet matrices ---------------------------------------------------------------------------------------
    # `xc batch` keeps a copy of each matrix it writes (one per output folder, replaced as the batch goes on), so
    # the dashboard's Fleet page lists them; a matrix's cells name ordinary runs of this store.
    def put_fleet(self, matrix: dict, out_dir: str) -> str:
        """Keep (or replace) the matrix of the batch writing to out_dir; its id."""
        out_dir = os.path.abspath(out_dir)
        fid = hashlib.sha256(out_dir.encode()).hexdigest()[:16]
        folder = os.path.join(self.root, FLEETS_DIR)
        os.makedirs(folder, exist_ok=True)
        write_json_atomic(os.path.join(folder, f"{fid}.json"), {"id": fid, "out_dir": out_dir, "saved": time.time(),
                                                                "matrix": matrix})
        return fid

    def fleets(self) -> list[dict]:
        """Every kept matrix, newest first: {id, out_dir, saved, matrix}; unreadable files are skipped."""
        folder = os.path.join(self.root, FLEETS_DIR)
        out = []
        for name in list_folder(folder):
            if not name.endswith(".json") or not _SAFE_KEY.fullmatch(name[:-5]):
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    entry = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(entry, dict) and isinstance(entry.get("matrix"), dict):
                out.append(entry)
        return sorted(out, key=lambda e: -float(e.get("saved") or 0))

    # -- writing ----------------------------------------------------------------------------------------------
    def put(self, key: str, report: dict, run_dir: str | None = None, origin: str = "cli",
            user: str | None = None) -> None:
        """Store the report and every file of run_dir (its inputs, capture, artifacts), then commit the run.
        `origin`: where it came from (the CLI, the dashboard, or a report.json imported without its files);
        `user`: who started it, where the dashboard knows (its signed-in user's email, else their subject id).
        Raises StoreUnavailable (an OSError) when the store cannot keep runs here."""
        with self._lock:
            self._follow_replacement()
            if self._db is None:
                raise StoreUnavailable(self.problem or f"the run store at {self.root} is not available")
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
        from .report.sidecar import SIDECAR_FILE, SIDECAR_FILES, dumps, encode
        text, side = dumps(report)
        for name in (REPORT_FILE, *SIDECAR_FILES):
            manifest.pop(name, None)      # the report given wins over a report.json in run_dir
        manifest[REPORT_FILE], n = self._add_bytes(text.encode())
        size += n
        if side is not None:
            manifest[SIDECAR_FILE], n = self._add_bytes(encode(side))
            size += n
        row = _row(key, report, manifest, size, origin, time.time(), user)
        # The record before the index row: a crash between the two leaves a complete run that a rebuild restores.
        self._write_record(row)
        self._sql(lambda db: _insert(db, row), write=True)
        self.evict()

    def delete(self, key: str) -> None:
        self._forget(key)
        self._collect()

    def evict(self) -> list[str]:
        """Drop least-recently-used runs until the store fits its bound; then remove unreferenced objects."""
        def pick(db) -> list[str]:
            dropped = []
            total = int(db.execute("SELECT COALESCE(SUM(bytes), 0) FROM runs").fetchone()[0])
            if total > self.max_bytes:
                for key, n in db.execute("SELECT key, bytes FROM runs ORDER BY last_used ASC").fetchall():
                    if total <= self.max_bytes:
                        break
                    db.execute("DELETE FROM runs WHERE key=?", (key,))
                    total -= n
                    dropped.append(key)
            return dropped
        dropped = self._sql(pick, default=[])
        for key in dropped:
            self._remove_record(key)
        if dropped:
            self._collect()
        return dropped

    def _forget(self, key: str) -> None:
        self._sql(lambda db: db.execute("DELETE FROM runs WHERE key=?", (key,)))
        self._remove_record(key)

    def _complete(self, key: str, manifest: dict) -> bool:
        """Whether the run's report (and sidecar) are still in objects/; a run without them is forgotten."""
        from .report.sidecar import sidecar_in
        side = sidecar_in(manifest)
        needed = [manifest.get(REPORT_FILE)] + ([manifest[side]] if side else [])
        if all(isinstance(h, str) and os.path.isfile(self._object(h)) for h in needed):
            return True
        self._forget(key)
        return False

    def _collect(self) -> None:
        rows = self._sql(lambda db: db.execute("SELECT key, manifest FROM runs").fetchall(), default=None)
        if rows is None:        # without a usable index nothing is known to be unreferenced
            return
        live, records = set(), set()
        for key, m in rows:
            manifest = _loads(m, {})
            live.update(manifest.values() if isinstance(manifest, dict) else ())
            records.add(_record_name(key))
        objects = os.path.join(self.root, OBJECTS_DIR)
        cutoff = time.time() - 60   # younger than this, an object or record may belong to a run being committed now
        for sub in list_folder(objects):
            for name in list_folder(os.path.join(objects, sub)):
                path = os.path.join(objects, sub, name)
                with contextlib.suppress(OSError):
                    if name not in live and os.path.getmtime(path) < cutoff:
                        os.remove(path)
        for name in self._record_names():
            path = os.path.join(self._records(), name)
            with contextlib.suppress(OSError):
                if name not in records and os.path.getmtime(path) < cutoff:
                    os.remove(path)

    # -- the index: open, check, repair -----------------------------------------------------------------------
    def _open(self) -> None:
        """Connect to the index and check it; move a damaged one aside and rebuild it, rebuild a missing one.
        The caller holds the lock and the opening lock."""
        self._close()
        existed = os.path.exists(self.index_path)
        try:
            db = self._connect()
        except _Damaged as e:
            self._repair(str(e))
            return
        except sqlite3.DatabaseError as e:
            if _is_damage(e):
                self._repair(_words(e))
            else:
                self._unavailable(e)
            return
        self._adopt(db)
        migrating = not os.path.isdir(self._records())
        with contextlib.suppress(OSError):
            os.makedirs(self._records(), exist_ok=True)
        try:
            empty = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
            if empty and (self._record_names() or (migrating and self._has_objects())):
                n, note = self._rebuild(db)
                say_once(f"the run index at {self.index_path} was {'empty' if existed else 'missing'}; rebuilt {n} "
                         f"run(s) from the stored objects{note}")
            elif migrating:
                # Written before run records existed: write them now, so a later rebuild loses nothing.
                for row in _rows(db):
                    with contextlib.suppress(OSError):
                        self._write_record(row)
        except sqlite3.DatabaseError as e:
            self._unavailable(e)

    def _connect(self) -> sqlite3.Connection:
        """A connection to a checked index holding xc's table (created in a new file). Raises _Damaged, or
        sqlite3's error when the file cannot be read or written."""
        db = sqlite3.connect(self.index_path, timeout=30, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL syncs at checkpoints, not at every commit: a page opening a run (which marks it
            # used) must not wait for a disk flush (0.1–0.3 s here). A crash may lose the last "used" marks, not
            # runs.
            db.execute("PRAGMA synchronous=NORMAL")
            check = [r[0] for r in db.execute("PRAGMA quick_check(3)")]
            if check != ["ok"]:
                raise _Damaged(f"SQLite's check says: {'; '.join(map(str, check))[:160]}")
            tables = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
                            if not r[0].startswith("sqlite_"))
            if set(tables) - {"runs"}:
                raise _Damaged(f"a database of something else, with tables {', '.join(tables)[:120]}")
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
            for column in ("summary", "user"):     # a store written before run summaries / users existed
                if column not in columns:
                    db.execute(f"ALTER TABLE runs ADD COLUMN {column} TEXT")
                    columns.add(column)
            missing = [c for c in _COLUMNS if c not in columns]
            if missing:
                raise _Damaged(f"its runs table has no {', '.join(missing)} column")
        except BaseException:
            db.close()
            raise
        return db

    def _adopt(self, db: sqlite3.Connection) -> None:
        self._db, self.problem = db, None
        try:
            self._ino = os.stat(self.index_path).st_ino
        except OSError:
            self._ino = None

    def _close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
        self._db = None

    def _unavailable(self, e: BaseException) -> None:
        self._close()
        self.problem = (f"the run index at {self.index_path} cannot be opened ({_words(e)}); runs are not kept — "
                        "check its permissions and that no other program holds it, or set XC_HOME to another folder")

    def _repair(self, reason: str) -> None:
        """Move the damaged index aside (with its WAL files, which belong to it) and rebuild it; say so in one
        line. The caller holds the lock and the opening lock."""
        self._close()
        aside = f"{self.index_path}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        try:
            for suffix in ("", "-wal", "-shm"):
                if os.path.lexists(self.index_path + suffix):
                    os.replace(self.index_path + suffix, aside + suffix)
            db = self._connect()
        except (OSError, _Damaged, sqlite3.Error) as e:
            self.problem = (f"the run index at {self.index_path} is damaged ({reason}) and could not be replaced "
                            f"({_words(e)}); runs are not kept — move it away, or set XC_HOME to another folder")
            return
        self._adopt(db)
        with contextlib.suppress(OSError):
            os.makedirs(self._records(), exist_ok=True)
        try:
            n, note = self._rebuild(db)
        except sqlite3.Error as e:
            self._unavailable(e)
            return
        say_once(f"the run index at {self.index_path} was damaged ({reason}); moved aside to {aside}; rebuilt {n} "
                 f"run(s) from the stored objects{note}")

    def _rebuild(self, db: sqlite3.Connection) -> tuple[int, str]:
        """Fill the index from the run records, keeping the runs whose report is still stored (files gone from
        objects/ are left out of their manifest); for a store with no records at all (written before they existed),
        the reports found among its objects. Returns (runs indexed, a note on what was recovered or dropped)."""
        from .report.sidecar import sidecar_in
        rows: dict[str, dict] = {}
        dropped = 0
        names = self._record_names()
        for name in names:
            row = self._read_record(name)
            if row is None:
                continue
            manifest = row["manifest"]
            needed = [REPORT_FILE] + ([sidecar_in(manifest)] if sidecar_in(manifest) else [])
            if not all(f in manifest and os.path.isfile(self._object(manifest[f])) for f in needed):
                dropped += 1
                self._remove_record(row["key"])
                continue
            row["manifest"] = {rel: h for rel, h in manifest.items() if os.path.isfile(self._object(h))}
            row["bytes"] = sum(os.path.getsize(self._object(h)) for h in set(row["manifest"].values()))
            rows[row["key"]] = row
        referenced = {h for row in rows.values() for h in row["manifest"].values()}
        # Only a store with no records at all predates them (a healthy open writes records for every run it has):
        # otherwise a report no record names is a stale copy awaiting collection, not a lost run.
        recovered = [] if names else self._recover_reports(referenced, set(rows))
        for row in recovered:
            rows[row["key"]] = row
            with contextlib.suppress(OSError):
                self._write_record(row)
        db.execute("BEGIN")
        try:
            for row in rows.values():
                _insert(db, row)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        notes = []
        if recovered:
            notes.append(f"{len(recovered)} of them recovered from the report alone (stored before run records "
                         "existed, so their other files cannot be matched)")
        if dropped:
            notes.append(f"{dropped} dropped: their report is gone")
        return len(rows), f" ({'; '.join(notes)})" if notes else ""

    def _recover_reports(self, referenced: set, keys: set) -> list[dict]:
        """Rows for the report.json files among objects no record names: their report, and their sidecar when
        exactly one stored sidecar holds its lists (stores that old wrote them plain)."""
        from .report.sidecar import PLAIN_SIDECAR_FILE
        reports, sidecars = [], {}
        objects = os.path.join(self.root, OBJECTS_DIR)
        for sub in sorted(list_folder(objects)):
            for digest in sorted(list_folder(os.path.join(objects, sub))):
                if digest in referenced or not _HEX64.fullmatch(digest):
                    continue
                path = os.path.join(objects, sub, digest)
                try:
                    if os.path.getsize(path) > MAX_RECOVER_BYTES:
                        continue
                    with open(path, "rb") as f:
                        if f.read(1) != b"{":
                            continue
                        f.seek(0)
                        data = json.loads(f.read())
                except (OSError, ValueError, RecursionError):
                    continue
                if _looks_like_report(data):
                    reports.append((digest, path, data))
                elif isinstance(data, dict) and isinstance(data.get("values"), dict) and "format" in data:
                    sidecars[digest] = set(data["values"])
        rows = []
        for digest, path, report in reports:
            key = (report.get("run") or {}).get("key") if isinstance(report.get("run"), dict) else None
            key = key if isinstance(key, str) and _SAFE_KEY.fullmatch(key) else digest[:32]
            if key in keys:       # an older report of a run that is indexed
                continue
            manifest = {REPORT_FILE: digest}
            detached = report.get("detached")
            if detached:
                pointers = set(detached.get("pointers") or []) if isinstance(detached, dict) else {None}
                match = [h for h, held in sidecars.items() if pointers <= held]
                if len(match) != 1:
                    continue
                manifest[PLAIN_SIDECAR_FILE] = match[0]
            try:
                size = sum(os.path.getsize(self._object(h)) for h in manifest.values())
                row = _row(key, report, manifest, size, "recovered", os.path.getmtime(path))
            except (OSError, KeyError, TypeError, AttributeError):
                continue
            keys.add(key)
            rows.append(row)
        return rows

    def _sql(self, fn, default=None, write: bool = False):
        """fn(db) under the lock. A damaged index found now is moved aside and rebuilt, then fn runs once more;
        an index another process replaced is reopened. When the index cannot be used, a read gets `default` (the
        reason said once) and a write raises StoreUnavailable."""
        with self._lock:
            self._follow_replacement()
            for attempt in range(2):
                if self._db is None:
                    break
                try:
                    return fn(self._db)
                except sqlite3.DatabaseError as e:
                    if attempt == 0 and _is_damage(e):
                        with _opening(self.root):
                            if self._replaced():
                                self._open()
                            else:
                                self._repair(_words(e))
                        continue
                    problem = (f"the run index at {self.index_path} cannot be used now ({_words(e)}); this run is "
                               "not kept — check its permissions and that no other program holds it")
                    if write:
                        raise StoreUnavailable(problem) from None
                    say_once(problem)
                    return default
            if write:
                raise StoreUnavailable(self.problem or f"the run store at {self.root} is not available")
            if self.problem:
                say_once(self.problem)
            return default

    def _replaced(self) -> bool:
        try:
            return os.stat(self.index_path).st_ino != self._ino
        except OSError:
            return True

    def _follow_replacement(self) -> None:
        """Another process moved a damaged index aside and rebuilt it (or it was deleted): use the new one."""
        if self._db is not None and self._replaced():
            with _opening(self.root):
                self._open()

    # -- run records ------------------------------------------------------------------------------------------
    def _records(self) -> str:
        return os.path.join(self.root, RECORDS_DIR)

    def _record_names(self) -> list[str]:
        return [n for n in list_folder(self._records()) if n.endswith(".json") and ".tmp-" not in n]

    def _write_record(self, row: dict) -> None:
        os.makedirs(self._records(), exist_ok=True)
        write_json_atomic(os.path.join(self._records(), _record_name(row["key"])), {"format": 1, **row})

    def _remove_record(self, key: str) -> None:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(self._records(), _record_name(key)))

    def _read_record(self, name: str) -> dict | None:
        """A record as an index row, or None for a file that is not one (half-written, edited, foreign)."""
        try:
            with open(os.path.join(self._records(), name)) as f:
                data = json.load(f)
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("key"), str) or not data["key"]:
            return None
        manifest, created = data.get("manifest"), data.get("created")
        if not (isinstance(manifest, dict) and manifest and isinstance(created, (int, float))
                and all(isinstance(k, str) and isinstance(v, str) and _HEX64.fullmatch(v)
                        for k, v in manifest.items())):
            return None
        row = {c: data.get(c) for c in _COLUMNS}
        row["last_used"] = row["last_used"] if isinstance(row["last_used"], (int, float)) else created
        row["summary"] = row["summary"] if isinstance(row["summary"], dict) else {}
        for c in ("source_name", "source_sha256", "targets", "status", "user"):
            row[c] = row[c] if isinstance(row[c], str) else None
        return row

    def _has_objects(self) -> bool:
        objects = os.path.join(self.root, OBJECTS_DIR)
        return any(list_folder(os.path.join(objects, sub)) for sub in list_folder(objects))

    # -- objects ----------------------------------------------------------------------------------------------
    def _object(self, digest: str) -> str:
        return os.path.join(self.root, OBJECTS_DIR, digest[:2], digest)

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
        else:
            os.utime(dest)      # a run that shares it now: not collected as an orphan while being committed
        return digest, len(data)

    def _manifest(self, key: str) -> dict | None:
        row = self._sql(lambda db: db.execute("SELECT manifest FROM runs WHERE key=?", (key,)).fetchone())
        manifest = _loads(row[0], None) if row else None
        return manifest if isinstance(manifest, dict) else None


def _row(key: str, report: dict, manifest: dict, size: int, origin: str, created: float,
         user: str | None = None) -> dict:
    src = report.get("source") or {}
    status = ",".join(sorted({t["status"] for t in (report.get("targets") or {}).values()}))
    return {"key": key, "created": created, "last_used": created, "bytes": size, "source_name": src.get("name"),
            "source_sha256": src.get("sha256"), "targets": ",".join(report.get("targets") or {}), "status": status,
            "manifest": manifest, "summary": run_summary(report, origin), "user": user}


def _select_with_report(db: sqlite3.Connection, cols: tuple) -> list:
    """Rows of `cols` with the hashes of each run's report and sidecar last, newest first. SQLite's JSON functions
    pick them out of the manifest (parsing every manifest in Python took 0.4 s for 1,000 runs); a SQLite built
    without them, or a manifest that is not JSON, gets the manifests parsed here, row by row."""
    from .report.sidecar import SIDECAR_FILES, sidecar_in
    head = f"SELECT {', '.join(cols)}"
    sidecar = ", ".join(f"json_extract(manifest, '$.\"{name}\"')" for name in SIDECAR_FILES)
    try:
        return db.execute(f"{head}, json_extract(manifest, '$.\"{REPORT_FILE}\"'), COALESCE({sidecar}) "
                          f"FROM runs ORDER BY created DESC").fetchall()
    except sqlite3.OperationalError as e:
        if "json" not in str(e).lower():
            raise
    out = []
    for r in db.execute(f"{head}, manifest FROM runs ORDER BY created DESC").fetchall():
        manifest = _loads(r[-1], None)
        manifest = manifest if isinstance(manifest, dict) else {}
        side = sidecar_in(manifest)
        out.append((*r[:-1], manifest.get(REPORT_FILE), manifest.get(side) if side else None))
    return out


def _insert(db: sqlite3.Connection, row: dict) -> None:
    values = [json.dumps(row[c]) if c in ("manifest", "summary") else row[c] for c in _COLUMNS]
    db.execute(f"INSERT OR REPLACE INTO runs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
               values)


def _rows(db: sqlite3.Connection) -> list[dict]:
    out = []
    for r in db.execute(f"SELECT {', '.join(_COLUMNS)} FROM runs").fetchall():
        row = dict(zip(_COLUMNS, r))
        row["manifest"] = _loads(row["manifest"], {})
        row["summary"] = _loads(row["summary"], {}) if row["summary"] else {}
        out.append(row)
    return out


def _record_name(key: str) -> str:
    """The record's file name: the key itself when it is a plain name, else a hash of it (never a path)."""
    return (key if _SAFE_KEY.fullmatch(key) else "h-" + hashlib.sha256(key.encode()).hexdigest()[:40]) + ".json"


def _looks_like_report(data) -> bool:
    return (isinstance(data, dict) and "schema_version" in data and isinstance(data.get("source"), dict)
            and isinstance(data.get("targets"), dict) and "checklist" in data)


def _loads(text, default):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default


