import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_SAMPLE_REPORTS = {}
# Every target, so one analysis per sample serves all tests that read sample reports.
ALL_TARGETS = ("ort-cpu", "ort-nnapi", "ort-coreml", "ort-cpu-int8", "coreml-ane", "coreml-cpu", "openvino-cpu")


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
