"""A limit or a fault while building the report is a finding, not a lost analysis: every target had finished, so
the report is built again without its optional parts (run.report_error says why and what was left out), and if
even that fails, a report of the targets' statuses is made."""
import dataclasses
import os

import xc_core.api as api
import xc_core.pipeline.scheduler as scheduler
from xc_core.report.schema import validate_report
from xc_core.worker import WorkerLimits


def _hoard():
    hoard = []
    while True:                          # past any limit: the worker is killed for its memory
        hoard.append(bytearray(64 << 20))


def greedy_full_report(args, workdir, phase):
    """The real report job, except that the full report runs out of memory (the lean one does not)."""
    from xc_core.pipeline import report_job
    if not args.get("lean"):
        phase("report")
        _hoard()
    return report_job(args, workdir, phase)


def greedy_always(args, workdir, phase):
    phase("report")
    _hoard()


def _report_job_is(monkeypatch, job: str) -> None:
    """The plan's report step runs `job` (a function of this module) in its worker instead."""
    *before, report = scheduler.PLAN
    monkeypatch.setattr(scheduler, "PLAN", (*before, dataclasses.replace(report, job=f"test_worker_report:{job}")))


def _analyze(tmp_path, monkeypatch, job: str):
    _report_job_is(monkeypatch, job)
    events = []
    report = api.analyze("sample:vision-mini", ["ort-cpu", "openvino-cpu"], out_dir=str(tmp_path / "out"),
                         worker_limits=WorkerLimits(timeout_s=300, memory_gib=2.5), progress=events.append)
    validate_report(report)
    return report, events


def test_a_memory_limit_while_building_the_report_keeps_every_target(tmp_path, monkeypatch):
    report, events = _analyze(tmp_path, monkeypatch, "greedy_full_report")
    for tid in ("ort-cpu", "openvino-cpu"):
        t = report["targets"][tid]
        assert t["status"] == "ok" and t["graph"]["nodes"] and t["drift"]["outputs"], tid
        assert "stages" not in t and "layout" not in t               # left out, and said so below
    assert report["reference"]["status"] == "ok"
    err = report["run"]["report_error"]
    assert err["error"].startswith("exceeded the 2.5 GiB memory limit in report"), err
    assert "the lowering stages and their step graphs" in err["left_out"]
    assert "divergence" not in report and report["stage_graphs"]["file"] is None
    assert any(e.step == "report-retry" and "memory limit" in e.error for e in events)
    assert not os.path.exists(tmp_path / "out" / "work")


def test_when_no_report_can_be_built_the_targets_statuses_are_kept(tmp_path, monkeypatch):
    report, _ = _analyze(tmp_path, monkeypatch, "greedy_always")
    assert set(report["targets"]) == {"ort-cpu", "openvino-cpu"}
    for t in report["targets"].values():
        assert t["status"] == "error" and t["error"].startswith("finished ok, but its result is not in this report")
        assert "memory limit" in t["error"]
    err = report["run"]["report_error"]
    assert "memory limit" in err["error"] and "memory limit" in err["again"]
    assert os.path.isdir(tmp_path / "out" / "artifacts" / "ort-cpu")         # what the targets wrote is kept


def test_the_cli_finishes_and_records_a_run_whose_report_hit_a_limit(tmp_path, monkeypatch, capsys):
    from xc_core.cli import main
    from xc_core.store import RunStore
    _report_job_is(monkeypatch, "greedy_full_report")
    monkeypatch.setenv("XC_HOME", str(tmp_path / "home"))
    assert main(["analyze", "sample:vision-mini", "--targets", "ort-cpu", "--out", str(tmp_path / "out"),
                 "--memory", "2.5", "--quiet"]) == 0
    assert "internal error" not in capsys.readouterr().err
    runs = RunStore(str(tmp_path / "home")).runs()
    assert len(runs) == 1 and runs[0]["status"] == "ok"
