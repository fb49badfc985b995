"""action.yml's scripts, run as GitHub Actions runs them (`bash --noprofile --norc -eo pipefail`, inputs as
environment variables, GITHUB_OUTPUT / GITHUB_STEP_SUMMARY files), against a git repository with a model in two
commits and a loopback stand-in for GitHub's API: the first push creates the comment, the gate fails on a real
regression after the comment is posted, the second push reuses the cached baseline and edits the same comment."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from fake_github import PR, REPO, TOKEN, serving

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "models/tiny.onnx"


def _tiny_onnx(path: str, seed: int, extra_op: bool) -> None:
    """x[1, 8] → MatMul → Add → Relu (→ Sigmoid when extra_op): a new op in the head is a regression under
    --max-op-increase 0."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
             helper.make_node("Add", ["mm", "b"], ["add"], name="add"),
             helper.make_node("Relu", ["add"], ["relu" if extra_op else "y"], name="relu")]
    if extra_op:
        nodes.append(helper.make_node("Sigmoid", ["relu"], ["y"], name="sigmoid"))
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
                     numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo, seed: int, extra_op: bool, message: str) -> str:
    _tiny_onnx(str(repo / MODEL), seed, extra_op)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


class Job:
    """One run of the action's steps in `repo`, as a new job on a new runner (its own RUNNER_TEMP), sharing the
    cached XC_HOME of earlier jobs."""

    def __init__(self, action: dict, repo, tmp, env: dict, inputs: dict, base_sha: str):
        self.action, self.repo, self.env, self.base_sha = action, repo, dict(env), base_sha
        self.inputs = {k: str(v.get("default", "")) for k, v in action["inputs"].items()} | inputs
        self.outputs: dict[str, dict[str, str]] = {}
        tmp.mkdir()
        self.env |= {"RUNNER_TEMP": str(tmp / "runner"), "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
                     "GITHUB_ENV": str(tmp / "env")}
        os.makedirs(self.env["RUNNER_TEMP"])
        for f in ("GITHUB_STEP_SUMMARY", "GITHUB_ENV"):
            open(self.env[f], "w").close()

    def _value(self, text: str) -> str:
        """The few expressions action.yml uses; any other is a failure, so a new one gets a stand-in here."""
        def one(m):
            expr = m.group(1).strip()
            if expr.startswith("inputs."):
                return self.inputs[expr[len("inputs."):]]
            if expr == "github.event.pull_request.base.sha":
                return self.base_sha
            step = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr)
            if step:
                return self.outputs.get(step.group(1), {}).get(step.group(2), "")
            raise AssertionError(f"action.yml uses an expression this test does not stand in for: {expr}")
        return re.sub(r"\$\{\{(.*?)\}\}", one, text)

    def run(self, name: str) -> subprocess.CompletedProcess:
        step = next(s for s in self.action["runs"]["steps"] if s.get("name") == name)
        output = os.path.join(self.env["RUNNER_TEMP"], f"output-{step.get('id', 'x')}")
        open(output, "w").close()
        env = self.env | {k: self._value(str(v)) for k, v in (step.get("env") or {}).items()}
        env["GITHUB_OUTPUT"] = output
        assert "${{" not in step["run"]
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                              cwd=self.repo, env=env, capture_output=True, text=True, timeout=900)
        with open(output) as f:
            self.outputs[step.get("id", "")] = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
        return done

    def summary(self) -> str:
        with open(self.env["GITHUB_STEP_SUMMARY"]) as f:
            return f.read()


@pytest.fixture
def shim_bin(tmp_path):
    """`xc` and `python` on PATH as the action's install step leaves them: this checkout's xc, the venv's python."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "xc").write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m xc_core "$@"\n')
    (bin_dir / "xc").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    return str(bin_dir)


@pytest.mark.slow
def test_the_action_gates_comments_once_and_reuses_the_cached_baseline(tmp_path, shim_bin):
    with open(os.path.join(ROOT, "action.yml")) as f:
        action = yaml.safe_load(f)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "ci@example.invalid")
    _git(repo, "config", "user.name", "ci")
    base_sha = _commit(repo, seed=0, extra_op=False, message="base")
    _commit(repo, seed=1, extra_op=True, message="head: one more op")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": PR, "base": {"sha": base_sha}}}))
    with serving() as gh:
        env = {"PATH": f"{shim_bin}:{os.environ['PATH']}", "HOME": str(tmp_path), "LANG": "C.UTF-8",
               "XC_HOME": str(tmp_path / "xc-home"),   # the cached store (the install step sets it; cache restores)
               "GITHUB_ACTION_PATH": ROOT, "GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": REPO,
               "GITHUB_API_URL": gh.url, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
        inputs = {"models": f"{MODEL}\n", "targets": "ort-cpu", "gate-args": "--max-op-increase 0",
                  "github-token": TOKEN}

        first = Job(action, repo, tmp_path / "job1", env, inputs, base_sha)
        logs = {}
        for name in ("Baseline models", "Analyze base and head, diff, gate", "Sticky pull-request comment"):
            logs[name] = done = first.run(name)
            assert done.returncode == 0, (name, done.stderr[-2000:])
        out = first.outputs["analyze"]
        assert out["exit"] == "1" and int(out["regressions"]) >= 1, (    # the added op, gated
            out, logs["Analyze base and head, diff, gate"].stderr[-3000:])
        assert "op" in first.summary() and MODEL in open(os.path.join(out["dir"], "comment.md")).read()
        gate = first.run("Gate")
        assert gate.returncode == 1 and "regression" in gate.stderr
        (comment,) = gh.ours(PR)
        first_id, first_body = comment["id"], comment["body"]       # the stand-in edits this dict in place
        assert first_body.startswith("<!-- xc-report -->\n") and f"`{MODEL}`" in first_body
        assert "regress" in first_body.lower()
        base_report = open(os.path.join(out["dir"], "1", "base", "report.json")).read()

        # A second push: the head changes again, the base does not. A new job, the same cached store.
        _commit(repo, seed=2, extra_op=False, message="head: back to three ops")
        second = Job(action, repo, tmp_path / "job2", env, inputs, base_sha)
        for name in ("Baseline models", "Analyze base and head, diff, gate", "Sticky pull-request comment", "Gate"):
            done = second.run(name)
            assert done.returncode == 0, (name, done.stderr[-2000:])
        assert second.outputs["baseline"]["cache-key"] == first.outputs["baseline"]["cache-key"]
        out2 = second.outputs["analyze"]
        assert out2["exit"] == "0" and out2["regressions"] == "0"
        # the baseline came back from the store as it was written: not compiled again (its timings would differ)
        assert open(os.path.join(out2["dir"], "1", "base", "report.json")).read() == base_report
        (edited,) = gh.ours(PR)
        assert edited["id"] == first_id and edited["body"] != first_body
        assert "No change in any compiler decision" in edited["body"]
        assert gh.methods().count("POST") == 1 and "PATCH" in gh.methods()


def test_xc_comment_takes_the_pr_from_the_actions_event_and_says_what_it_did(tmp_path, monkeypatch, capsys):
    from xc_core.cli import main
    md = tmp_path / "diff.md"
    md.write_text("### xc diff\n\nNo change in any compiler decision.\n")
    with serving() as gh:
        for k, v in {"GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": REPO, "GITHUB_TOKEN": TOKEN}.items():
            monkeypatch.setenv(k, v)
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv("GITHUB_EVENT_PATH", raising=False)
        assert main(["comment", str(md)]) == 2
        assert "no pull request number" in capsys.readouterr().err
        event = tmp_path / "event.json"
        event.write_text(json.dumps({"pull_request": {"number": PR}}))
        monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
        assert main(["comment", str(md)]) == 0 and main(["comment", str(md), "--marker", "<!-- xc-report:b -->"]) == 0
        assert main(["comment", str(md)]) == 0
        err = capsys.readouterr().err.splitlines()
        assert err[0].startswith("xc: created comment") and err[2].startswith("xc: updated comment")
        assert len(gh.ours(PR)) == 1 and len(gh.ours(PR, "<!-- xc-report:b -->")) == 1
        assert main(["comment", str(md), "--marker", "xc-report"]) == 2      # not an HTML comment: one line
        assert "marker" in capsys.readouterr().err


def test_step_summary_outside_actions_is_one_line_and_appends_inside(tmp_path, monkeypatch, capsys):
    from xc_core.cli import _append_step_summary
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    _append_step_summary("### one")
    assert "GITHUB_STEP_SUMMARY is not set" in capsys.readouterr().err
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    _append_step_summary("### one")
    _append_step_summary("### two\n")
    assert summary.read_text() == "earlier step\n### one\n\n### two\n\n"
