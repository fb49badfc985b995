"""Find a run by what a reviewer has at hand: a run id from the store, a run folder, or a report.json (a CI
artifact). Whatever it is, the result is the same: the Report, and where its files are."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from ..errors import XcInputError, first_line
from ..store import REPORT_FILE, RunStore
from ..views.typed_report import as_report

MIN_ID_PREFIX = 6
ACCEPTED = "a run id (xc runs), a run folder (analyze --out) or a report.json"


@dataclass
class Run:
    report: dict
    label: str                                          # how to name it in a diff header
    key: str | None = None                              # its id in the store, if it is there
    files: dict[str, str] = field(default_factory=dict)  # path in the run (artifacts/…) -> file on disk


def load_run(ref: str, store: RunStore | None = None) -> Run:
    """The run `ref` names; bad input raises XcInputError with one line. A folder's report.json and sidecar are
    read only as regular files inside it, and its artifacts are its regular files (safe_files)."""
    if os.path.isdir(ref):
        path = os.path.join(ref, REPORT_FILE)
        if not os.path.lexists(path):
            raise XcInputError(f"{ref}: a folder without {REPORT_FILE} (accepted: {ACCEPTED})")
        return _from_file(path)
    if os.path.lexists(ref):        # a file, or whatever else is there: _from_file says which it is
        return _from_file(ref)
    if os.sep in ref or ref.endswith(".json"):
        raise XcInputError(f"{ref}: no such file or folder (accepted: {ACCEPTED})")
    return from_store(ref, store or RunStore())


def from_store(ref: str, store: RunStore) -> Run:
    key = resolve_key(ref, store)
    report = store.get(key)
    if report is None:
        raise XcInputError(f"run {ref}: its report is missing from the store ({store.root})")
    return Run(report, label=f"{report['source']['name']} (run {key[:12]})", key=key, files=store.files(key))


def resolve_key(ref: str, store: RunStore) -> str:
    """A full run key or a unique prefix of one (at least 6 characters, as `runs` prints 12)."""
    ref = ref.strip().lower()
    if len(ref) < MIN_ID_PREFIX or not all(c in "0123456789abcdef" for c in ref):
        raise XcInputError(f"{ref!r}: not a run id, file or folder (accepted: {ACCEPTED})")
    keys = [r["key"] for r in store.runs() if r["key"].startswith(ref)]
    if not keys:
        raise XcInputError(f"run {ref}: no such run in the store ({store.root}; xc runs lists them)")
    if len(keys) > 1:
        raise XcInputError(f"run {ref}: matches {len(keys)} runs; give more of the id")
    return keys[0]


def _from_file(path: str) -> Run:
    """A report.json on disk, its sidecar and artifacts beside it: each read only as a regular file inside the
    report's folder (a symlink out of it, a /proc entry, a device or a FIFO is refused or skipped: safe_files)."""
    from ..report.sidecar import sidecar_in
    from ..safe_files import regular_files, warn_skipped
    name = os.path.basename(path)
    folder = os.path.dirname(os.path.abspath(path))
    data = _read_bounded(path, folder, "max_report_mb", f"{name}: the file is")
    sidecar = None
    try:
        side = sidecar_in(os.listdir(folder))
    except OSError as e:
        raise XcInputError(f"{name}: its folder cannot be listed ({e.strerror or type(e).__name__})") from None
    if side:
        sidecar = _read_bounded(os.path.join(folder, side), folder, "max_sidecar_mb",
                                f"{name}: its sidecar {side} is")
    report = parse_report(data, name, sidecar)
    tree = regular_files(folder, exclude_top=("work",))
    files = {rel: full for rel, full in tree.files.items() if rel != REPORT_FILE}
    if not _belongs(report, files):
        files = {}          # a report.json copied elsewhere: its artifacts are not the files beside it
    elif tree.skipped:
        warn_skipped(folder, tree.skipped)
    return Run(report, label=f"{report['source']['name']} ({path})", files=files)


def _belongs(report: dict, files: dict) -> bool:
    # parse_report has read it as a Report already (its check renders it): the conversion is kept, not redone.
    wanted = [p for t in as_report(report).targets.values() for p in t.artifacts if isinstance(p, str)]
    return not wanted or any(p in files or any(f.startswith(p + "/") for f in files) for p in wanted)


def _read_bounded(path: str, folder: str, limit: str, subject: str) -> bytes:
    """A file's bytes, read only as a regular file inside `folder`, its size checked against a report limit before
    it is read (and while it is)."""
    from ..limits import MIB, exceeded, report_limit
    from ..safe_files import read_regular
    return read_regular(path, root=folder, max_bytes=int(report_limit(limit) * MIB),
                        too_big=lambda size: exceeded(limit, subject, size), shown=os.path.basename(path))


def parse_report(data: bytes, name: str = REPORT_FILE, sidecar: bytes | None = None) -> dict:
    """A report.json's bytes (and its sidecar's, report.nodes.json.gz or plain, when it has one), checked: within
    the size limits (the sidecar's also once decompressed), JSON,
    nested no deeper than an xc report, an xc report, and valid against the report's schema once the sidecar's
    lists are back in it. Anything else raises XcInputError naming the first problem in one line."""
    from ..limits import MIB, REPORT_MAX_DEPTH, exceeded, report_limit
    from ..report.sidecar import SIDECAR_FILE, SidecarError, attach
    if len(data) > report_limit("max_report_mb") * MIB:
        raise exceeded("max_report_mb", f"{name}: the file is", len(data))
    if sidecar is not None and len(sidecar) > report_limit("max_sidecar_mb") * MIB:
        raise exceeded("max_sidecar_mb", f"{name}: its sidecar {SIDECAR_FILE} is", len(sidecar))
    try:
        # Decoded here, strictly: json.loads would take bytes that are not UTF-8 (and lone surrogates) as they come.
        report = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise XcInputError(f"{name}: nested deeper than an xc report (at most {REPORT_MAX_DEPTH} levels); "
                           "accepted: the report.json written by xc analyze") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise XcInputError(f"{name}: not JSON ({first_line(e)}); accepted: an xc report.json") from None
    if not isinstance(report, dict) or "targets" not in report or "source" not in report:
        raise XcInputError(f"{name}: JSON but not an xc report (no source/targets); accepted: the report.json "
                           "written by xc analyze")
    try:
        attach(report, lambda: sidecar, max_bytes=int(report_limit("max_sidecar_mb") * MIB))
    except SidecarError as e:
        raise XcInputError(f"{name}: {e}") from None
    except UnicodeDecodeError:
        raise XcInputError(f"{name}: its sidecar {SIDECAR_FILE} is not UTF-8 text") from None
    if deeper_than(report, REPORT_MAX_DEPTH):
        raise XcInputError(f"{name}: nested deeper than an xc report (at most {REPORT_MAX_DEPTH} levels); "
                           "accepted: the report.json written by xc analyze")
    # (a compressed sidecar's text is not at hand here: its strings are checked the slow way)
    if lone_surrogate_in(report, data, sidecar):
        raise XcInputError(f"{name}: holds a string that is not Unicode text (a lone surrogate, \\ud800-"
                           "\\udfff); accepted: the report.json written by xc analyze")
    from ..pipeline.assemble import SCHEMA_VERSION
    if report.get("schema_version") != SCHEMA_VERSION:
        raise XcInputError(f"{name}: report schema {str(report.get('schema_version'))[:40]!r}, this xc reads "
                           f"{SCHEMA_VERSION!r}")
    from ..report.schema import report_problem
    problem = report_problem(report)
    if problem is not None:
        raise XcInputError(f"{name}: not a valid xc report at {first_line(problem)[:240]}")
    _check_readable(report, name)
    return report


def _check_readable(report: dict, name: str) -> None:
    """The schema leaves many blocks open (stages, layout, fusion and divergence matrices): a hand-edited or crafted
    report can match it and still not be what the views read. Reading it once the way the Markdown report and the
    diff do refuses such a report here, in one line, instead of failing on every page or command that shows it."""
    from .diff import diff_reports
    from .markdown import report_markdown
    try:
        report_markdown(report)
        diff_reports(report, report)
    except Exception as e:  # noqa: BLE001 — whatever the views trip on, the file is the cause
        raise XcInputError(f"{name}: matches the report schema but is not what xc writes ({type(e).__name__}: "
                           f"{first_line(e)[:120]}); accepted: a report.json written by xc analyze, "
                           "unedited") from None


# A \uD800-\uDFFF escape: a pair is a character beyond the BMP, a lone one a str that cannot be written as UTF-8
# (to a terminal, a file or the browser). The pattern finds candidates; encoding the parsed value decides.
_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def lone_surrogate_in(value, *raw: bytes | None) -> bool:
    """Whether parsed JSON `value` holds a string with a lone surrogate; `raw`, the bytes it was parsed from,
    spares the check when none has a candidate escape (gzip bytes cannot be searched: they always check)."""
    if not any(r is not None and (r[:2] == b"\x1f\x8b" or _LONE_SURROGATE.search(r)) for r in raw):
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def deeper_than(value, bound: int) -> bool:
    """Whether containers nest more than `bound` deep: level by level, not recursing (that is the point)."""
    level, depth = [value], 1
    while level:
        if depth > bound:
            return True
        below = []
        for v in level:
            for child in (v.values() if type(v) is dict else v):
                if type(child) is dict or type(child) is list:
                    below.append(child)
        level, depth = below, depth + 1
    return False
