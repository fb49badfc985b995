"""The default target set: every target but the deprecated ones (ort-nnapi: NNAPI is deprecated since Android 15),
for `xc analyze`/`xc batch` without --targets, the API and the dashboard's first selection; `--targets all` and an
explicit id still reach a deprecated target, and every place that lists targets says why it is out."""
import os

import pytest
from streamlit.testing.v1 import AppTest

from xc_core.cli import build_parser, main, requested_targets
from xc_core.targets import REGISTRY, default_target_ids, make_target, shipped_together, target_ids

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NNAPI_LABEL = "NNAPI is deprecated since Android 15"


def test_the_default_set_is_every_target_but_the_deprecated_ones():
    assert REGISTRY["ort-nnapi"].deprecated == NNAPI_LABEL and not REGISTRY["ort-nnapi"].in_default_set()
    defaults = default_target_ids()
    assert "ort-nnapi" not in defaults
    available = [t for t in target_ids() if REGISTRY[t].available()[0]]
    assert set(available) - {"ort-nnapi"} <= set(defaults)
    assert defaults == [t for t in target_ids() if REGISTRY[t].deprecated is None]     # display order kept


def test_analyze_without_targets_leaves_nnapi_out_and_all_keeps_it():
    parser = build_parser()
    default = requested_targets(parser.parse_args(["analyze", "sample:vision-mini"]).targets)
    assert default == default_target_ids() and "ort-nnapi" not in default
    everything = requested_targets(parser.parse_args(["analyze", "sample:vision-mini", "--targets", "all"]).targets)
    assert everything == target_ids() and "ort-nnapi" in everything
    # Still selectable by id and as a variant.
    assert requested_targets("ort-nnapi,ort-nnapi[fp16=true]") == ["ort-nnapi", "ort-nnapi[fp16=True]"]
    assert make_target("ort-nnapi[fp16=true]").settings.fp16 is True


def test_batch_without_targets_takes_the_manifests_else_the_default_set():
    args = build_parser().parse_args(["batch", "models.txt", "--out", "o"])
    assert args.targets is None
    assert requested_targets(args.targets, None) == default_target_ids()
    assert requested_targets(args.targets, ["ort-nnapi", "ort-cpu"]) == ["ort-nnapi", "ort-cpu"]
    assert requested_targets("all", ["ort-cpu"]) == target_ids()


def test_help_says_what_all_and_the_default_are(capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "or all: every target, the deprecated ones too" in help_text
    assert "default: every target but those `xc targets` marks deprecated" in help_text


def test_xc_targets_says_why_nnapi_is_out(capsys):
    assert main(["targets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("ort-nnapi "))
    assert lines[at + 1].strip().startswith(f"deprecated: {NNAPI_LABEL} (not in the default set")
    assert sum("deprecated:" in line for line in lines) == sum(1 for t in target_ids() if REGISTRY[t].deprecated)


def test_the_default_pairs_are_android_against_ios_without_nnapi():
    pairs = shipped_together()
    assert pairs[:2] == [("litert-xnnpack", "coreml-ane"), ("executorch-xnnpack", "executorch-coreml")]
    assert not [p for p in pairs if "ort-nnapi" in p]
    ranks = [r for cls in REGISTRY.values() for r in vars(cls).get("shipped_with", {}).values()]
    assert len(ranks) == len(set(ranks)), "two pairs share a rank: their order would be the registry's"


def test_the_picker_lists_nnapi_with_why_it_is_out_and_starts_without_it():
    from pages._ui import KEPT_WIDGET_PREFIX, default_targets
    assert "ort-nnapi" not in default_targets()
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    at.session_state["targets"] = []        # nothing picked: the sidebar draws, no analysis starts
    at.run()
    assert not at.exception, at.exception
    picker = at.multiselect(key=KEPT_WIDGET_PREFIX + "targets")
    nnapi = [o for o in picker.options if o.startswith("ort-nnapi ")]
    assert nnapi == [f"ort-nnapi — {REGISTRY['ort-nnapi'].label} ({NNAPI_LABEL})"]
    assert not [o for o in picker.options if "deprecated" in o and not o.startswith("ort-nnapi ")]
    assert "deprecated" in picker.help
