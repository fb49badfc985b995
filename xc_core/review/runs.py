"""Find a run by what a reviewer has at hand: a run id from the store, a run folder, or a report.json (a CI
artifact). Whatever it is, the result is the same: the Report, and where its files are."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from ..errors import XcInputError, first_line
from ..store import REPORT_FILE, RunStore

MIN_ID_PREFIX = 6
ACCEPTED = "a run id (xc runs), a run folder (analyze --out) or a report.json"


@dataclass
class Run:
    report: dict
    label: str                                          # how to name it in a diff header
    key: str | None = None                              # its id in the store, if it is there
    files: dict[str, str] = field(default_factory=dict)  # path in the run (artifacts/…) -> file on disk


def load_run(ref: str, store: RunStore | None = None) -> Run:
    """The run `ref` names; bad input raises XcInputError with one line."""
    if os.path.isdir(ref):
        path = os.path.join(ref, REPORT_FILE)
        if not os.path.isfile(path):
            raise XcInputError(f"{ref}: a folder without {REPORT_FILE} (accepted: {ACCEPTED})")
        return _from_file(path)
    if os.path.isfile(ref):
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
    from ..report.sidecar import sidecar_in
    name = os.path.basename(path)
    data = _read_bounded(path, "max_report_mb", f"{name}: the file is")
    folder = os.path.dirname(os.path.abspath(path))
    sidecar = None
    side = sidecar_in([n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n))])
    if side:
        sidecar = _read_bounded(os.path.join(folder, side), "max_sidecar_mb", f"{name}: its sidecar {side} is")
    report = parse_report(data, os.path.basename(path), sidecar)
    files = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, folder).replace(os.sep, "/")
            if rel != REPORT_FILE and not os.path.islink(full) and not rel.startswith("work/"):
                files[rel] = full
    if not _belongs(report, files):
        files = {}          # a report.json copied elsewhere: its artifacts are not the files beside it
    return Run(report, label=f"{report['source']['name']} ({path})", files=files)


def _belongs(report: dict, files: dict) -> bool:
    wanted = [p for t in report.get("targets", {}).values() for p in t.get("artifacts") or [] if isinstance(p, str)]
    return not wanted or any(p in files or any(f.startswith(p + "/") for f in files) for p in wanted)


def _read_bounded(path: str, limit: str, subject: str) -> bytes:
    """A file's bytes, its size checked against a report limit before it is read."""
    from ..limits import MIB, exceeded, report_limit
    try:
        size = os.path.getsize(path)
        if size > report_limit(limit) * MIB:
            raise exceeded(limit, subject, size)
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise XcInputError(f"{os.path.basename(path)}: cannot be read ({e.strerror or type(e).__name__})") from None


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
    if _deeper_than(report, REPORT_MAX_DEPTH):
        raise XcInputError(f"{name}: nested deeper than an xc report (at most {REPORT_MAX_DEPTH} levels); "
                           "accepted: the report.json written by xc analyze")
    # (a compressed sidecar's text is not at hand here: its strings are checked the slow way)
    if _LONE_SURROGATE.search(data) or (sidecar is not None and (sidecar[:2] == b"\x1f\x8b"
                                                                 or _LONE_SURROGATE.search(sidecar))):
        try:
            json.dumps(report, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise XcInputError(f"{name}: holds a string that is not Unicode text (a lone surrogate, \\ud800-"
                               "\\udfff); accepted: the report.json written by xc analyze") from None
    from ..report.build import SCHEMA_VERSION
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
# (to a terminal, a file or the browser). The pattern finds candidates; encoding the report decides.
_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _deeper_than(value, bound: int) -> bool:
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


