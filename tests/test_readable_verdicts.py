"""Verdicts read without colour and without an emoji font (a word beside every symbol, symbols a text font draws),
and targets grouped by toolchain family for the tables that give each target a column."""
import os
import subprocess

import pytest

from xc_core.analysis.checklist import VERDICT
from xc_core.fleet.render import cell_label, matrix_markdown
from xc_core.views.rows import colour_verdicts, verdict_symbol
from xc_core.views.target_groups import target_groups

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FIFTEEN = ["ort-cpu", "ort-nnapi", "ort-coreml", "ort-cpu-int8", "coreml-ane", "coreml-cpu", "openvino-cpu",
           "inductor-cpu", "executorch-xnnpack", "executorch-vulkan", "executorch-coreml", "coreai-cpu", "coreai-ane",
           "litert-xnnpack", "litert-gpu"]


def test_every_verdict_carries_its_word_and_a_text_symbol():
    words = {"pass": "pass", "warn": "warn", "fail": "FAIL", "not applicable": "n/a"}
    for verdict, shown in VERDICT.items():
        symbol, word = shown.split(" ", 1)
        assert word == words[verdict]
        assert not any(0x1F000 <= ord(c) or c in "✅❌➖\ufe0f" for c in shown), shown     # no emoji
        assert verdict_symbol(verdict) == shown            # the tag before a finding is never the symbol alone
    assert len({s.split(" ", 1)[0] for s in VERDICT.values()}) == len(VERDICT)   # cells are told apart by it


@pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v fc-list"], capture_output=True).returncode != 0,
                    reason="fontconfig is not installed")
def test_the_verdict_symbols_are_in_dejavu_sans_which_the_dockerfile_installs():
    """The Dockerfile installs fonts-dejavu-core for these symbols: each must be one of its glyphs."""
    fonts = subprocess.run(["fc-list", ":family=DejaVu Sans", "file"], capture_output=True, text=True).stdout
    if not fonts.strip():
        pytest.skip("DejaVu Sans is not installed here")
    for shown in VERDICT.values():
        code = f"{ord(shown[0]):x}"
        have = subprocess.run(["fc-list", f":family=DejaVu Sans:charset={code}", "family"], capture_output=True,
                              text=True).stdout
        assert have.strip(), f"DejaVu Sans has no glyph for {shown[0]!r} (U+{code})"
    assert "fonts-dejavu-core" in open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8").read()


def test_findings_get_their_verdicts_colour_in_the_dashboards_markdown():
    line = "✗ FAIL 3 ops fall back to the CPU · ✓ pass outputs match · ⚠ warn runs fp16 · – n/a not run here"
    assert colour_verdicts(line) == (":red[**✗ FAIL**] 3 ops fall back to the CPU · :green[**✓ pass**] outputs "
                                     "match · :orange[**⚠ warn**] runs fp16 · :gray[**– n/a**] not run here")
    assert colour_verdicts("no verdict here") == "no verdict here"


def test_fleet_markdown_keeps_the_status_word_beside_its_emoji():
    ok = {"status": "ok", "accelerated_share": {"value": 0.94}, "fallbacks": {"value": 2}}
    assert cell_label(ok, marks=True) == "✅ ok 94% acc · 2 fb"
    assert cell_label({"status": "error"}, marks=True) == "❌ error"
    assert cell_label(ok) == "ok 94% acc · 2 fb"                   # the grid and matrix.html: no emoji at all
    md = matrix_markdown({"manifest": "m", "models": [{"name": "a"}], "targets": ["ort-cpu"], "complete": True,
                          "cells": [{"model": "a", "target": "ort-cpu", **ok}]})
    assert "| ✅ ok 94% acc · 2 fb |" in md


def test_fifteen_targets_group_by_family_in_order():
    groups = target_groups(FIFTEEN, 6)
    assert groups == [("ONNX Runtime · Core ML", FIFTEEN[:6]),
                      ("OpenVINO · Inductor · ExecuTorch", FIFTEEN[6:11]),
                      ("Core AI · LiteRT", FIFTEEN[11:])]
    # A family larger than a group is cut, and the next family does not join its last part.
    assert target_groups(FIFTEEN[:5], 3) == [("ONNX Runtime (1 of 2)", FIFTEEN[:3]),
                                             ("ONNX Runtime (2 of 2)", FIFTEEN[3:4]), ("Core ML", FIFTEEN[4:5])]
    assert target_groups(["my-target[opt=1]"], 8) == [("my", ["my-target[opt=1]"])]     # an unknown family
    assert target_groups([], 8) == []
    with pytest.raises(ValueError):
        target_groups(FIFTEEN, 0)
