"""`pip install .`: the wheel's metadata agrees with requirements.txt, it carries the `xc` command and the report
schema, and the installed package works from a folder that is not the checkout."""
import email
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _requirement_lines(path: str) -> set[str]:
    with open(path) as f:
        return {re.sub(r"\s+", "", line.split("#", 1)[0]).lower() for line in f if line.split("#", 1)[0].strip()}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    """The wheel `pip install .` builds, made from a copy of the project (building writes build/ and *.egg-info
    beside the sources, which must not land in the checkout)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "requirements.txt"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(os.path.join(ROOT, "xc_core"), src / "xc_core",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    # --no-build-isolation: the venv's setuptools builds it, so the test needs no download
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(src)], check=True, capture_output=True, text=True)
    (path,) = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    return path


def test_wheel_metadata_is_requirements_txt_and_the_version(wheel):
    import xc_core
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_string(z.read(meta_name).decode())
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert meta["Name"] == "xc" and meta["Version"] == xc_core.__version__
    requires = {re.sub(r"\s+", "", r).lower() for r in meta.get_all("Requires-Dist")}
    assert requires == _requirement_lines(os.path.join(ROOT, "requirements.txt"))
    assert not any(r.startswith("onnx2torch") for r in requires)     # installed with --no-deps, on its own
    assert re.search(r"^xc\s*=\s*xc_core\.cli:main$", entry_points, re.M)
    assert "xc_core/report/report.schema.json" in names
    assert all(n.startswith(("xc_core/", "xc-")) for n in names), [n for n in names if not n.startswith("xc")]


def test_the_installed_command_works_outside_the_checkout(wheel, tmp_path):
    """Installed into its own folder (the venv supplies the dependencies), run from a folder that is not the
    checkout: `xc --version`, `xc samples` and a one-line usage error come from the installed copy."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), wheel], check=True, capture_output=True, text=True)
    env = {**os.environ, "PYTHONPATH": str(target), "XC_HOME": str(tmp_path / "home")}
    xc = str(target / "bin" / "xc")
    work = tmp_path / "elsewhere"
    work.mkdir()

    def run(*args):
        return subprocess.run([xc, *args], cwd=work, env=env, capture_output=True, text=True, timeout=300)

    import xc_core
    v = run("--version")
    assert v.returncode == 0 and v.stdout.strip() == f"xc {xc_core.__version__}"
    where = subprocess.run([sys.executable, "-c", "import xc_core; print(xc_core.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True)
    assert where.stdout.strip().startswith(str(target))
    samples = run("samples")
    assert samples.returncode == 0 and "sample:vision-mini" in samples.stdout
    bad = run("diff", "nope", "nope2")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "xc runs" in bad.stderr


def test_every_xc_call_in_the_action_names_a_real_subcommand_and_real_flags():
    """action.yml drives the CLI through shell scripts: a renamed flag would only fail on GitHub. Each `xc SUB …`
    line there must use a subcommand and options the parser knows."""
    import yaml

    from xc_core.cli import build_parser
    with open(os.path.join(ROOT, "action.yml")) as f:
        action = yaml.safe_load(f)
    assert action["runs"]["using"] == "composite"
    subparsers = next(a for a in build_parser()._actions if a.dest == "command").choices
    calls = []
    for step in action["runs"]["steps"]:
        script = re.sub(r"\\\n\s*", " ", step.get("run") or "")
        for line in script.splitlines():
            if line.strip().startswith("#"):
                continue
            # `xc` where a command starts: a line's start, after if/then/&&/||, or in $( … )
            for m in re.finditer(r"(?:^\s*|\bif |\bthen |&& |\|\| |\$\()xc (\w[\w-]*)([^|;)]*)", line):
                calls.append((m.group(1), m.group(2)))
    assert {sub for sub, _ in calls} >= {"analyze", "diff", "report", "comment"}
    for sub, rest in calls:
        assert sub in subparsers, sub
        known = set(subparsers[sub]._option_string_actions)
        for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest):
            assert flag in known, f"xc {sub} has no {flag}"
    # inputs reach the scripts as environment variables, never pasted into them (no script injection)
    for step in action["runs"]["steps"]:
        assert "${{ inputs." not in (step.get("run") or ""), step.get("name")


def test_onnx_route_without_onnx2torch_says_how_to_install_it(monkeypatch):
    """`pip install .` cannot pull onnx2torch (it declares torchvision); the ONNX → PyTorch route then says what to
    install in one line instead of an ImportError."""
    import builtins

    from xc_core.errors import XcInputError
    from xc_core.onnx_route import converters
    real_import = builtins.__import__

    def no_onnx2torch(name, *args, **kwargs):
        if name == "onnx2torch" or name.startswith("onnx2torch."):
            raise ModuleNotFoundError("No module named 'onnx2torch'", name="onnx2torch")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_onnx2torch)
    for mod in [m for m in sys.modules if m == "onnx2torch" or m.startswith("onnx2torch.")]:
        monkeypatch.delitem(sys.modules, mod)
    with pytest.raises(XcInputError) as e:
        converters.import_onnx2torch()
    assert "pip install --no-deps" in str(e.value) and "\n" not in str(e.value)


def test_the_missing_onnx2torch_message_names_the_pinned_version():
    from xc_core.onnx_route.converters import ONNX2TORCH_VERSION
    assert f"onnx2torch=={ONNX2TORCH_VERSION}" in _requirement_lines(os.path.join(ROOT, "requirements-nodeps.txt"))
