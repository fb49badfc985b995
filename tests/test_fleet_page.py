"""The Fleet page through AppTest: no matrix yet is said in one line; a kept matrix renders under every colouring
and family filter; a ?fleet= link picks its matrix; an uploaded file that is not a matrix is one error line."""
import os

import pytest
from streamlit.testing.v1 import AppTest

from xc_core.fleet.matrix import SCHEMA, family

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cell(model, target, status="ok", share=None, fallbacks=None, drift=1e-6, time_us=50.0):
    fig = (lambda v, ev: None if v is None else {"value": v, "evidence": ev})
    return {"model": model, "target": target, "family": family(target), "status": status, "cached": False,
            "error": None if status == "ok" else "it failed", "advice": None, "run": "ab" * 16,
            "accelerated_share": fig(share, "predicted-runtime"), "fallbacks": fig(fallbacks, "predicted-runtime"),
            "fusions": fig(3, "reported"),
            "worst_drift": None if status != "ok" else {"value": drift, "evidence": "measured", "output": "y"},
            "time_us": None if status != "ok" else {"value": time_us, "evidence": "measured", "host_cpu": "cpu"}}


def _matrix(manifest="fleet.txt"):
    models = ["<img src=x onerror=alert(1)>", "conv"]
    return {"schema": SCHEMA, "xc_version": "0", "created_at": "2026-01-01T00:00:00Z", "complete": True,
            "manifest": manifest, "targets": ["ort-cpu", "ort-nnapi", "openvino-cpu"], "shards": [],
            "backend": "local", "toolchains": {}, "host": {"cpu": "cpu", "cores": 2},
            "models": [{"name": m, "source": f"{m}.onnx", "run": "ab" * 16, "status": "ok"} for m in models],
            "cells": [_cell(models[0], "ort-cpu"), _cell(models[0], "ort-nnapi", share=0.8, fallbacks=2),
                      _cell(models[0], "openvino-cpu", status="error"),
                      _cell(models[1], "ort-cpu", time_us=10.0), _cell(models[1], "ort-nnapi", share=1.0, fallbacks=0),
                      _cell(models[1], "openvino-cpu", drift=0.2)]}


def _fleet_page(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=300)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.run()
    return at.switch_page("pages/fleet.py").run()


def test_no_matrix_yet_is_one_line():
    from xc_core.store import RunStore
    if RunStore().fleets():
        pytest.skip("this session's store already keeps a matrix")
    at = _fleet_page()
    assert not at.exception
    assert any("No fleet matrices yet" in i.value for i in at.info)


def test_a_kept_matrix_renders_under_every_colouring_and_filter(tmp_path):
    from xc_core.store import RunStore
    store = RunStore()
    first = store.put_fleet(_matrix("first.txt"), str(tmp_path / "a"))
    store.put_fleet(_matrix("second.txt"), str(tmp_path / "b"))
    at = _fleet_page({"fleet": first})
    assert not at.exception
    assert at.selectbox(key="fleet_pick").value == first
    grid = at.dataframe[0].value
    assert list(grid.columns) == ["ort-cpu", "ort-nnapi", "openvino-cpu"]
    assert grid.loc["conv", "ort-nnapi"].startswith("ok 100% acc · 0 fb")
    assert grid.loc["<img src=x onerror=alert(1)>", "openvino-cpu"] == "error"
    for colour in ("status", "accelerated share", "fallbacks", "worst drift", "time"):
        at.selectbox(key="fleet_colour").set_value(colour).run()
        assert not at.exception, colour
    at.multiselect(key="fleet_families").set_value(["openvino"]).run()
    assert list(at.dataframe[0].value.columns) == ["openvino-cpu"]
    at.multiselect(key="fleet_families").set_value([]).run()
    assert not at.exception and any("No target of the chosen families" in i.value for i in at.info)


FIFTEEN = ["ort-cpu", "ort-nnapi", "ort-coreml", "ort-cpu-int8", "coreml-ane", "coreml-cpu", "openvino-cpu",
           "inductor-cpu", "executorch-xnnpack", "executorch-vulkan", "executorch-coreml", "coreai-cpu", "coreai-ane",
           "litert-xnnpack", "litert-gpu"]


def test_fifteen_targets_are_shown_a_family_group_at_a_time(tmp_path):
    """Fifteen target columns need sideways scrolling at 1280 px: the grid shows a group of families at a time
    (at most FLEET_COLUMNS targets), and every target is in one group."""
    from xc_core.store import RunStore
    m = _matrix("fifteen.txt")
    m["targets"] = FIFTEEN
    m["cells"] = [_cell(model["name"], t) for model in m["models"] for t in FIFTEEN]
    fid = RunStore().put_fleet(m, str(tmp_path / "c"))
    at = _fleet_page({"fleet": fid})
    assert not at.exception
    groups = at.radio(key="fleet_group")
    seen = []
    for k in range(len(groups.options)):
        at.radio(key="fleet_group").set_value(k).run()
        assert not at.exception
        columns = list(at.dataframe[0].value.columns)
        assert 1 <= len(columns) <= 3 and len({family(t) for t in columns}) <= 3
        seen += columns
    assert seen == [t for t in FIFTEEN if t in seen] and sorted(seen) == sorted(FIFTEEN)
    assert at.radio(key="fleet_group").options[0].startswith("ONNX Runtime")
