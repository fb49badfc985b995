"""Every imported report.json (History, `report`, `diff`) ends in a one-line refusal naming the first problem, never a
traceback or an "internal error": nesting, sizes, sidecar pointers, bytes that are not text. A full disk is the
machine's error (exit 2), not xc's bug."""
import errno
import io
import json
import os

import pytest
from streamlit.testing.v1 import AppTest

from xc_core.cli import main
from xc_core.errors import XcInputError
from xc_core.limits import REPORT_LIMITS, REPORT_MAX_DEPTH
from xc_core.report.sidecar import SIDECAR_FILE
from xc_core.review.runs import parse_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEEP = 200_000


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    """A real report (vision-mini on ort-cpu), as the CLI wrote it."""
    out = tmp_path_factory.mktemp("small")
    assert main(["analyze", "sample:vision-mini", "--targets", "ort-cpu", "--out", str(out), "--quiet",
                 "--no-store"]) == 0
    return json.loads((out / "report.json").read_text())


def _detached(report: dict, pointers, values: dict | None = None) -> tuple[bytes, bytes]:
    """report.json claiming `pointers` are in its sidecar, and a sidecar holding `values` (default: each pointer)."""
    data = {**report, "detached": {"file": SIDECAR_FILE, "pointers": pointers, "bytes": 1}}
    values = values if values is not None else {p: [] for p in pointers if isinstance(p, str)}
    return json.dumps(data).encode(), json.dumps({"format": 1, "values": values}).encode()


def _cases(report: dict) -> dict[str, tuple[bytes, bytes | None, str]]:
    """name -> (report.json, report.nodes.json or None, what the refusal must say)."""
    deep_run = json.loads(json.dumps(report))
    nest: dict = {}
    deep_run["run"] = {"nest": nest}
    for _ in range(REPORT_MAX_DEPTH + 5):      # under json's recursion limit, over xc's bound
        nest["x"] = {}
        nest = nest["x"]
    name = dict(report["source"], name="a\ud800b")
    return {
        "deep-array": (b"[" * DEEP + b"]" * DEEP, None, "nested deeper"),
        "deep-in-report": (b'{"source": {}, "targets": ' + b"[" * DEEP + b"]" * DEEP + b"}", None, "nested deeper"),
        "deep-under-json-limit": (json.dumps(deep_run).encode(), None, "nested deeper"),
        "deep-sidecar": (_detached(report, ["/capture"])[0],
                         b'{"format":1,"values":{"/capture":' + b"[" * DEEP + b"]" * DEEP + b"}}", "nested too deep"),
        "pointer-to-missing-key": (*_detached(report, ["/targets/nope/graph/nodes"]), "no place"),
        "pointer-to-missing-index": (*_detached(report, ["/capture/graph/nodes/99999"]), "no place"),
        "pointer-not-an-index": (*_detached(report, ["/targets/ort-cpu/graph/nodes/abc"]), "no place"),
        "pointer-to-the-root": (*_detached(report, [""]), "no place"),
        "pointer-not-a-pointer": (*_detached(report, ["xx"]), "no place"),
        "pointer-not-a-string": (*_detached(report, [5]), "does not hold 5"),
        "pointer-without-marker": (*_detached(report, ["/targets/ort-cpu/graph"]), "no marker"),
        "detached-not-an-index": (json.dumps({**report, "detached": "all of it"}).encode(), b"{}", "not an xc sidecar"),
        "sidecar-not-json": (_detached(report, ["/capture"])[0], b"{nope", "not JSON"),
        "sidecar-not-utf8": (_detached(report, ["/capture"])[0], b'{"values": "\xff"}', "not UTF-8"),
        "lone-surrogate": (json.dumps({**report, "source": name}).encode(), None, "lone surrogate"),
        "not-utf8": (json.dumps(report).encode().replace(b"vision-mini", b"vision\xffmini", 1), None, "not JSON"),
    }


def test_crafted_reports_are_refused_in_one_line(small_report):
    cases = _cases(small_report)
    for name, (data, side, needle) in cases.items():
        with pytest.raises(XcInputError) as err:
            parse_report(data, "report.json", side)
        text = str(err.value)
        assert needle in text and "\n" not in text and len(text) < 400, (name, text)
        assert text.startswith("report.json: "), (name, text)
    # The same report without the crafted parts is accepted: the refusals are about what was crafted.
    assert parse_report(json.dumps(small_report).encode())["source"]["name"] == "vision-mini"


def test_report_and_diff_exit_2_not_internal_errors(small_report, tmp_path, capsys):
    good = tmp_path / "good"
    good.mkdir()
    (good / "report.json").write_text(json.dumps(small_report))
    for name, (data, side, needle) in _cases(small_report).items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "report.json").write_bytes(data)
        if side is not None:
            (folder / SIDECAR_FILE).write_bytes(side)
        for argv, code in ((["report", str(folder), "--format", "md"], 2),
                           (["diff", str(good), str(folder), "--gate"], 2)):
            assert main(argv) == code, (name, argv)
            out, err = capsys.readouterr()
            assert err.startswith("xc: report.json: ") and err.count("\n") == 1, (name, err)
            assert needle in err and "internal error" not in err and "Traceback" not in err, (name, err)


def test_report_sizes_are_bounded_by_their_own_limits(small_report, tmp_path, monkeypatch, capsys):
    assert REPORT_LIMITS["max_report_mb"].default == 64 and REPORT_LIMITS["max_sidecar_mb"].default == 512
    data, side = _detached(small_report, ["/targets/ort-cpu/graph/nodes"])
    big = data + b" " * (1 << 20)            # whitespace: still a valid report, but over 1 MiB
    monkeypatch.setenv("XC_MAX_REPORT_MB", "1")
    with pytest.raises(XcInputError, match=r"above the 1 MiB limit on the size of a report\.json read back "
                                           r"\(raise it with the environment variable XC_MAX_REPORT_MB\)"):
        parse_report(big)
    monkeypatch.setenv("XC_MAX_SIDECAR_MB", "1")
    with pytest.raises(XcInputError, match="XC_MAX_SIDECAR_MB"):
        parse_report(data, "report.json", side + b" " * (1 << 20))
    # From a file, the size is checked before the file is read.
    (tmp_path / "report.json").write_bytes(big)
    assert main(["report", str(tmp_path / "report.json")]) == 2
    err = capsys.readouterr().err
    assert "XC_MAX_REPORT_MB" in err and err.count("\n") == 1
    monkeypatch.setenv("XC_MAX_REPORT_MB", "lots")
    assert main(["report", str(tmp_path / "report.json")]) == 2
    assert "XC_MAX_REPORT_MB='lots'" in capsys.readouterr().err


def _history_with_upload(tmp_path, files: dict[str, bytes]) -> AppTest:
    """The History page with these files in its report.json uploader (AppTest cannot upload)."""
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    script = f"""
import io, os, sys
import streamlit as st
sys.path.insert(0, {ROOT!r})
class _Upload(io.BytesIO):
    def __init__(self, path):
        super().__init__(open(path, "rb").read())
        self.name = os.path.basename(path)
st.file_uploader = lambda *a, **k: [_Upload(p) for p in {[str(tmp_path / n) for n in files]!r}]
st.session_state["_xc_routed"] = True     # as app.py marks a session before a page runs (pages/_ui.guard_page)
import runpy
runpy.run_path(os.path.join({ROOT!r}, "pages", "history.py"), run_name="__main__")
"""
    at = AppTest.from_string(script, default_timeout=120)
    at.run()
    return at


def test_history_refuses_crafted_imports_in_one_line(small_report, tmp_path):
    cases = _cases(small_report)
    for name in ("deep-array", "deep-under-json-limit", "pointer-to-missing-key", "pointer-not-an-index",
                 "lone-surrogate"):
        data, side, needle = cases[name]
        folder = tmp_path / name
        folder.mkdir()
        at = _history_with_upload(folder, {"report.json": data, **({SIDECAR_FILE: side} if side else {})})
        assert not at.exception, (name, at.exception)
        errors = [e.value.replace("\\", "") for e in at.error if "report.json:" in e.value.replace("\\", "")]
        assert len(errors) == 1 and needle in errors[0] and "\n" not in errors[0], (name, errors)
        assert not any("Imported" in s.value for s in at.success), name


def test_a_full_disk_is_the_machines_error_not_xcs(small_report, tmp_path, monkeypatch, capsys):
    import xc_core.api
    import xc_core.cli
    (tmp_path / "report.json").write_text(json.dumps(small_report))

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(xc_core.cli, "open", no_space, raising=False)      # what _write opens --out with
    assert main(["report", str(tmp_path), "--format", "md", "--out", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and err.count("\n") == 1 and "internal" not in err
    monkeypatch.undo()

    class FullStdout(io.StringIO):
        def write(self, s):
            raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("sys.stdout", FullStdout())
    assert main(["diff", str(tmp_path), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot write to standard output (No space left on device)" in err
    monkeypatch.undo()

    # analyze: report.json written into --out on a full disk, or a worker that met one (its error is text).
    scratch = os.path.join(os.environ["XC_HOME"], "work", "run-1", "capture.onnx")
    for error in (OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "report.json")),
                  OSError(errno.ENOSPC, "No space left on device", scratch),
                  RuntimeError(f"capturing it: OSError: [Errno 28] No space left on device: '{scratch}'")):
        def fail(*a, error=error, **k):
            raise error
        monkeypatch.setattr(xc_core.api, "analyze", fail)
        assert main(["analyze", "sample:vision-mini", "--targets", "ort-cpu", "--out", str(tmp_path / "out"),
                     "--no-store"]) == 2
        err = capsys.readouterr().err
        assert "No space left on device" in err and err.count("\n") == 1, err
        assert "internal error" not in err and os.path.join("work", "run-1") not in err, err
    # Anything else is still xc's bug: exit 1, without the server's paths.
    monkeypatch.setattr(xc_core.api, "analyze", lambda *a, **k: {}["x"])
    assert main(["analyze", "sample:vision-mini", "--targets", "ort-cpu", "--out", str(tmp_path / "out")]) == 1
    assert "internal error: KeyError" in capsys.readouterr().err
