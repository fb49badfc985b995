"""The single-run Markdown (a pull-request comment) keeps under ~20 KB by default — the headline, the verdicts and
the findings, the long tables left to the HTML report — and `--full` keeps every table, up to GitHub's cap."""
import pytest

from xc_core.review.markdown import BRIEF_CHARS, MAX_CHARS, report_markdown


@pytest.mark.slow
def test_the_default_markdown_is_brief_and_full_keeps_everything(sample_report, tmp_path, capsys):
    from xc_core.cli import main
    report, out = sample_report("vision-mini")
    brief, full = report_markdown(report), report_markdown(report, full=True)
    assert len(brief) <= BRIEF_CHARS < len(full) <= MAX_CHARS
    # First the headline and a line per target, then the verdicts and the findings that fail or warn.
    assert brief.startswith("### xc: vision-mini") and "#### Checklist" in brief
    assert all(f"- **{tid}** — " in brief for tid in report["targets"])
    assert "(2) Is any operator assigned to the CPU" in brief and "pass (" not in brief.split("#### Checklist")[1]
    # The long tables: in the full text, named as left to the HTML report in the brief one.
    for section in ("#### Where the time goes", "<summary>Lowering stages"):
        assert section in full and section not in brief
    assert "--format md --full" in brief
    # The CLI: the brief text by default, every table with --full.
    assert main(["report", out, "--format", "md"]) == 0
    assert capsys.readouterr().out == brief
    assert main(["report", out, "--format", "md", "--full"]) == 0
    assert capsys.readouterr().out == full
