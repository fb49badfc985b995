"""xc_core's layer contract (.importlinter, checked by import-linter's `lint-imports`): each layer imports only the
layers below it, counting imports inside functions; inside pipeline/ too; sources never import targets; readers
import only ir; nothing below views imports views; nothing imports streamlit; the pages import only what the
contract lists. A planted circle and a page reaching into the pipeline must break it. (Circles inside one package
are tests/test_import_circles.py's.)"""
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def _lint(root: str) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache", "--config", os.path.join(root, ".importlinter")], cwd=root,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root}, timeout=300)


def test_the_layer_contract_holds():
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def _copy(tmp_path):
    copy = tmp_path / "repo"
    for package in ("xc_core", "pages"):
        shutil.copytree(os.path.join(ROOT, package), copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, ".importlinter"), copy / ".importlinter")
    return copy


def test_a_planted_circle_breaks_it(tmp_path):
    """A reader that reaches up into the façade from inside a function — the kind of import that hid four
    circles before — is refused, and the message names both ends."""
    copy = _copy(tmp_path)
    with open(copy / "xc_core" / "readers" / "onnx.py", "a") as f:
        f.write("\n\ndef _planted():\n    from ..api import analyze\n    return analyze\n")
    out = _lint(str(copy))
    assert out.returncode != 0, out.stdout[-2000:]
    assert "BROKEN" in out.stdout and "xc_core.readers.onnx" in out.stdout and "xc_core.api" in out.stdout


def test_a_page_that_runs_a_step_itself_breaks_it(tmp_path):
    """A page that reaches past the service into the pipeline (here from inside a function) is refused."""
    copy = _copy(tmp_path)
    with open(copy / "pages" / "stages.py", "a") as f:
        f.write("\n\ndef _planted():\n    from xc_core.pipeline.steps import prepare\n    return prepare\n")
    out = _lint(str(copy))
    assert out.returncode != 0, out.stdout[-2000:]
    assert "1 broken" in out.stdout and "pages is not allowed to import xc_core.pipeline" in out.stdout
    assert "pages.stages -> xc_core.pipeline.steps" in out.stdout
