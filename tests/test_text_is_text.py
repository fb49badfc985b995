"""Text xc did not write is text: a terminal escape (ESC, an OSC that sets the window title, BEL, a C1 CSI) or a
right-to-left override in a model's node names or a batch model's name reaches no output raw — not the CLI's stdout
or stderr, report.md, report.html, matrix.md, matrix.html, nor the run or fleet diff as text or Markdown — but shows
as its escape (\\x1b, \\u202e); and `@everyone [l](http://x)` as a model name is no mention and no link in the
Markdown xc writes (matrix.md, the diffs: what the PR comment and the job summary post)."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from xc_core.errors import printable_line, visible

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Clear the screen, set the window title (OSC … BEL), a C1 CSI, a right-to-left override, a zero-width space.
EVIL = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202e\u200b"
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\u200b")
MENTION = "@everyone [l](http://x)"
_LINK = re.compile(r"(?<!\\)\]\(")      # "](" that Markdown reads as a link: its "]" not escaped


def _xc(*args, home):
    env = {**os.environ, "XC_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "xc_core", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def _onnx(path, scope: str) -> str:
    """Add → Relu → Mul, each node named under `scope` (a node name is a module path to xc's ONNX reader)."""
    w = numpy_helper.from_array(np.full((4,), 0.5, np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["a"], name=f"/blk{scope}/Add"),
             helper.make_node("Relu", ["a"], ["r"], name=f"/blk{scope}/Relu{scope}"),
             helper.make_node("Mul", ["r", "w"], ["y"], name=f"/head{scope}/Mul")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def _raw(text: str) -> list[str]:
    return [repr(c) for c in RAW if c in text]


def test_one_rule_shows_what_would_act_as_its_escape():
    assert visible(EVIL) == "\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202e\\u200b"
    assert visible("\x7f\x00\u2028 µ → ✅ ok") == "\\x7f\\x00\\u2028 µ → ✅ ok"     # DEL, NUL, a line separator
    assert printable_line(f"two\nlines\t{EVIL}") == "two lines " + visible(EVIL)
    from xc_core.views import topology
    assert topology.visible is visible          # the drawings use the same rule


def test_markdown_text_is_inert_and_shows_escapes():
    from xc_core.review.md_text import code, html_text, text
    cell = text(f"{MENTION} {EVIL} a|b <img>")
    assert not _raw(cell) and "@everyone" not in cell and not _LINK.search(cell) and "http://" not in cell
    assert "@\u2060everyone" in cell and "\\|" in cell and "&lt;img&gt;" in cell and "\\\\x1b" in cell
    assert not _raw(code(EVIL)) and not _raw(html_text(EVIL)) and "@everyone" not in html_text(MENTION)


def test_node_names_reach_no_output_raw(tmp_path):
    """The CLI's tables and progress, report.md and report.html of a model whose node names are hostile, and the
    diff of it against the same graph with plain names, as text and as Markdown."""
    home = tmp_path / "home"
    evil, plain = tmp_path / "evil", tmp_path / "plain"
    run = _xc("analyze", _onnx(tmp_path / "evil.onnx", EVIL + MENTION), "--targets", "ort-cpu", "--out", evil,
              "--md", tmp_path / "report.md", "--md-full", "--html", tmp_path / "report.html", "--no-store", home=home)
    assert run.returncode == 0, run.stderr
    short = _xc("report", evil, "--format", "md", home=home)     # the default, shorter Markdown: no name raw either
    assert short.returncode == 0, short.stderr
    assert _xc("analyze", _onnx(tmp_path / "plain.onnx", ""), "--targets", "ort-cpu", "--out", plain, "--quiet",
               "--no-store", home=home).returncode == 0
    outputs = {"analyze stdout": run.stdout, "analyze stderr": run.stderr,
               "report.md": (tmp_path / "report.md").read_text(encoding="utf-8"),
               "report.html": (tmp_path / "report.html").read_text(encoding="utf-8"),
               "report md (short)": short.stdout}
    for fmt in ("text", "md"):
        d = _xc("diff", plain, evil, "--format", fmt, home=home)
        assert d.returncode == 0, d.stderr
        outputs[f"diff {fmt}"], outputs[f"diff {fmt} stderr"] = d.stdout, d.stderr
    assert {where: _raw(text) for where, text in outputs.items() if _raw(text)} == {}
    # The names did reach each output, as their escapes: the terminal's time table names the costliest nodes.
    for where in ("analyze stdout", "diff text"):
        assert visible(EVIL) in outputs[where], where
    for where in ("report.md", "diff md"):
        assert "\\\\x1b\\[2J\\\\x1b\\]0;pwned\\\\x07\\\\x9b31m\\\\u202e\\\\u200b" in outputs[where], where
        assert "@everyone" not in outputs[where] and not _LINK.search(outputs[where]), where
        assert "http://x" not in outputs[where], where
    assert visible(EVIL) in outputs["report.html"]


def test_batch_model_names_reach_no_output_raw_and_mention_nobody(tmp_path):
    """A manifest names its models: the batch's progress and summary, matrix.md, matrix.html, and the fleet diff
    (text and Markdown) against a batch without them."""
    home = tmp_path / "home"
    model = _onnx(tmp_path / "m.onnx", "")
    (tmp_path / "base.yaml").write_text(json.dumps({"models": [{"source": model, "name": "plain"}]}))
    (tmp_path / "new.yaml").write_text(json.dumps({"models": [
        {"source": model, "name": "plain"}, {"source": model, "name": f"bad{EVIL}name"},
        {"source": model, "name": MENTION}]}))
    base = _xc("batch", tmp_path / "base.yaml", "--targets", "ort-cpu", "--out", tmp_path / "base", "--quiet",
               home=home)
    assert base.returncode == 0, base.stderr
    new = _xc("batch", tmp_path / "new.yaml", "--targets", "ort-cpu", "--out", tmp_path / "new", home=home)
    assert new.returncode == 0, new.stderr
    outputs = {"batch stdout": new.stdout, "batch stderr": new.stderr,
               "matrix.md": (tmp_path / "new" / "matrix.md").read_text(encoding="utf-8"),
               "matrix.html": (tmp_path / "new" / "matrix.html").read_text(encoding="utf-8")}
    for fmt in ("text", "md"):
        d = _xc("diff", tmp_path / "base", tmp_path / "new", "--format", fmt, home=home)
        assert d.returncode == 0, d.stderr
        outputs[f"diff {fmt}"], outputs[f"diff {fmt} stderr"] = d.stdout, d.stderr
    assert {where: _raw(text) for where, text in outputs.items() if _raw(text)} == {}
    assert json.loads((tmp_path / "new" / "matrix.json").read_text())["models"][1]["name"] == f"bad{EVIL}name"
    for where in ("batch stderr", "matrix.html", "diff text"):
        assert f"bad{visible(EVIL)}name" in outputs[where], where
    for where in ("matrix.md", "diff md"):
        md = outputs[where]
        assert "bad\\\\x1b\\[2J" in md and "@\u2060everyone" in md, where
        assert "@everyone" not in md and not _LINK.search(md) and "http://x" not in md, where
