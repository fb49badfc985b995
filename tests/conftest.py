import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The run store and scratch folders of this test session live in one temporary XC_HOME, never the user's.
import shutil  # noqa: E402
import tempfile  # noqa: E402
_OWN_HOME = None if "XC_HOME" in os.environ else tempfile.mkdtemp(prefix="pytest-xc-home-")
if _OWN_HOME:
    os.environ["XC_HOME"] = _OWN_HOME
# Test modules import torch before xc_core: keep TorchInductor's cache folder out of /tmp from the start.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.environ["XC_HOME"], "cache", "inductor"))

_SAMPLE_REPORTS = {}
# The ONNX Runtime, Core ML, OpenVINO and Inductor targets, so one analysis per sample serves all tests that read
# sample reports (tests/test_read_back_conformance.py asks for every registered target, ExecuTorch, Core AI and
# LiteRT too).
ALL_TARGETS = ("ort-cpu", "ort-nnapi", "ort-coreml", "ort-cpu-int8", "coreml-ane", "coreml-cpu", "openvino-cpu",
               "inductor-cpu")


@pytest.fixture(scope="session")
def sample_report(tmp_path_factory):
    """analyze() on a bundled sample, once per (sample, targets) for the whole session."""
    from xc_core.api import analyze

    def get(name: str, targets: tuple[str, ...] = ALL_TARGETS):
        key = (name, targets)
        if key not in _SAMPLE_REPORTS:
            out = tmp_path_factory.mktemp(f"{name}-{'-'.join(targets)}")
            _SAMPLE_REPORTS[key] = analyze(f"sample:{name}", list(targets), out_dir=str(out)), str(out)
        return _SAMPLE_REPORTS[key]
    return get


def pytest_collection_modifyitems(config, items):
    """Every test in a test_browser*.py file starts a Streamlit server and Chromium: slow (pytest.ini), whichever
    test is added there next."""
    for item in items:
        if item.path.name.startswith("test_browser"):
            item.add_marker(pytest.mark.slow)


def _xc_temp_entries() -> set[str]:
    tmp = tempfile.gettempdir()
    return {n for n in os.listdir(tmp) if n.startswith("xc-")}


_TEMP_BEFORE = _xc_temp_entries()


def pytest_sessionfinish(session, exitstatus):
    """No run may leave folders behind: none in xc's scratch area, no xc-* folder in the system temp dir."""
    if "xc_core.service" in sys.modules:    # AppTest runs start background analyses: let them end first
        sys.modules["xc_core.service"].AnalysisService.all_idle(600)
    from xc_core.paths import home
    work = os.path.join(home(), "work")
    left = sorted(os.listdir(work)) if os.path.isdir(work) else []
    new_temp = sorted(_xc_temp_entries() - _TEMP_BEFORE)
    if (left or new_temp) and exitstatus == 0:
        session.exitstatus = 1
        print(f"\nleft behind: scratch {left[:5]}, temp {new_temp[:5]}")
    if _OWN_HOME:   # the session's store goes with it
        shutil.rmtree(_OWN_HOME, ignore_errors=True)
