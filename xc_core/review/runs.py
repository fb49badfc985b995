"""Find a run by what a reviewer has at hand: a run id from the store, a run folder, or a report.json (a CI
artifact). Whatever it is, the result is the same: the Report, and where its files are."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..errors import XcInputError
from ..store import REPORT_FILE, RunStore

MIN_ID_PREFIX = 6
ACCEPTED = "a run id (python -m xc_core runs), a run folder (analyze --out) or a report.json"


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
        raise XcInputError(f"run {ref}: no such run in the store ({store.root}; python -m xc_core runs lists them)")
    if len(keys) > 1:
        raise XcInputError(f"run {ref}: matches {len(keys)} runs; give more of the id")
    return keys[0]


def _from_file(path: str) -> Run:
    from ..report.sidecar import SIDECAR_FILE
    with open(path, "rb") as f:
        data = f.read()
    folder = os.path.dirname(os.path.abspath(path))
    sidecar = None
    if os.path.isfile(os.path.join(folder, SIDECAR_FILE)):
        with open(os.path.join(folder, SIDECAR_FILE), "rb") as f:
            sidecar = f.read()
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
    wanted = [p for t in report.get("targets", {}).values() for p in t.get("artifacts") or []]
    return not wanted or any(p in files or any(f.startswith(p + "/") for f in files) for p in wanted)


def parse_report(data: bytes, name: str = REPORT_FILE, sidecar: bytes | None = None) -> dict:
    """A report.json's bytes (and its report.nodes.json's, when it has one), checked: JSON, an xc report, and
    valid against the report's schema once the sidecar's lists are back in it."""
    from ..limits import MIB, Limits
    limit = Limits.from_env().max_file_mb
    if len(data) > limit * MIB:
        raise XcInputError(f"{name}: {len(data) / MIB:.0f} MiB is over the {limit:g} MiB limit for a file "
                           "(XC_MAX_FILE_MB)")
    try:
        report = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise XcInputError(f"{name}: not JSON ({_first_line(e)}); accepted: an xc report.json") from None
    if not isinstance(report, dict) or "targets" not in report or "source" not in report:
        raise XcInputError(f"{name}: JSON but not an xc report (no source/targets); accepted: the report.json "
                           "written by python -m xc_core analyze")
    from ..report.sidecar import MissingSidecar, attach
    if sidecar is not None and len(sidecar) > limit * MIB:
        raise XcInputError(f"{name}: its sidecar is {len(sidecar) / MIB:.0f} MiB, over the {limit:g} MiB limit for a "
                           "file (XC_MAX_FILE_MB)")
    try:
        attach(report, lambda: sidecar.decode() if sidecar is not None else None)
    except MissingSidecar as e:
        raise XcInputError(f"{name}: {e}") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise XcInputError(f"{name}: its sidecar is not JSON ({_first_line(e)})") from None
    from ..report.build import SCHEMA_VERSION
    if report.get("schema_version") != SCHEMA_VERSION:
        raise XcInputError(f"{name}: report schema {report.get('schema_version')!r}, this xc reads "
                           f"{SCHEMA_VERSION!r}")
    from ..report.schema import report_problem
    problem = report_problem(report)
    if problem is not None:
        raise XcInputError(f"{name}: not a valid xc report at {_first_line(problem)[:240]}")
    return report


def _first_line(e) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
