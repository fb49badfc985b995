"""`xc mcp` as an assistant meets it, through the official MCP SDK's own clients: the tools and their read-only
annotations, the Overview's exact line for a target's fallbacks, a run diffed against itself passing the gate,
paths outside the roots (a symlink out of one too) and unknown targets refused in one line, streamable HTTP on
loopback only with its Host check, and a read-only server whose analyses leave $XC_HOME untouched and nothing but
the protocol on stdout. One real analysis (sample:vision-mini on ort-cpu and ort-nnapi) serves the module."""
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
TOOLS = {"list_targets", "list_runs", "analyze", "explain_fallbacks", "explain_drift", "diff_runs", "get_repro"}


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A root folder holding a real run (`xc analyze … --out`), a folder outside it, and an empty XC_HOME."""
    base = tmp_path_factory.mktemp("mcp")
    root, outside, home, tmp = (base / n for n in ("root", "outside", "home", "tmp"))
    for d in (root, outside, home, tmp):
        d.mkdir()
    env = {**os.environ, "XC_HOME": str(home), "TMPDIR": str(tmp), "PYTHONPATH": ROOT}
    done = subprocess.run([PYTHON, "-m", "xc_core", "analyze", "sample:vision-mini", "--targets", "ort-cpu,ort-nnapi",
                           "--out", str(root / "vm"), "--no-store", "--quiet"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (outside / "model.onnx").write_bytes(b"not a model, and not ours to read")
    os.symlink(outside / "model.onnx", root / "link.onnx")
    return {"root": str(root), "outside": str(outside), "home": str(home), "tmp": str(tmp), "env": env,
            "run": str(root / "vm")}


def _session(place, body, *extra):
    """Run `body(session)` against `xc mcp` over stdio (the SDK's stdio_client), started in the root."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def go():
        params = StdioServerParameters(command=PYTHON, args=["-m", "xc_core", "mcp", *extra], env=place["env"],
                                       cwd=place["root"])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await body(session)
    return asyncio.run(go())


def _error_line(result) -> str:
    assert result.isError
    text = result.content[0].text
    assert "\n" not in text and "Traceback" not in text
    return text


def test_stdio_tools_answer_in_the_dashboards_words(place):
    from xc_core.review.runs import load_run
    from xc_core.views.rows import verdict_line
    report = load_run(place["run"]).report

    async def body(s):
        listed = (await s.list_tools()).tools
        fallbacks = await s.call_tool("explain_fallbacks", {"run": "vm", "target": "ort-nnapi"})
        drift = await s.call_tool("explain_drift", {"run": place["run"], "target": "ort-nnapi"})
        diff = await s.call_tool("diff_runs", {"base": "vm", "head": os.path.join("vm", "report.json")})
        repro = await s.call_tool("get_repro", {"run": "vm", "target": "ort-nnapi"})
        unknown = await s.call_tool("explain_fallbacks", {"run": "vm", "target": "coreml-ane"})
        outside = await s.call_tool("analyze", {"path": os.path.join(place["outside"], "model.onnx")})
        linked = await s.call_tool("analyze", {"path": "link.onnx"})
        run_outside = await s.call_tool("explain_drift", {"run": place["outside"], "target": "ort-cpu"})
        no_run = await s.call_tool("explain_drift", {"run": "abcdef123456", "target": "ort-cpu"})
        bad_type = await s.call_tool("list_runs", {"limit": "many"})
        return listed, fallbacks, drift, diff, repro, unknown, outside, linked, run_outside, no_run, bad_type
    listed, fallbacks, drift, diff, repro, unknown, outside, linked, run_outside, no_run, bad_type = \
        _session(place, body)

    assert {t.name for t in listed} == TOOLS
    for t in listed:        # read-only by default: analyze too (it writes only to the server's scratch store)
        assert t.annotations.readOnlyHint is True and t.annotations.destructiveHint is False, t.name
        assert len(t.description) > 200 and t.outputSchema, t.name

    # The Overview's line, exactly as the function the dashboard calls returns it, then the fallbacks with reasons.
    assert not fallbacks.isError
    answer = fallbacks.structuredContent
    assert answer["verdict_line"] == verdict_line(report, "ort-nnapi")
    assert "fall back to the CPU" in answer["verdict_line"]
    assert fallbacks.content[0].text.splitlines()[0] == f"ort-nnapi: {verdict_line(report, 'ort-nnapi')}"
    assert answer["split"]["evidence"] == "predicted-runtime" and answer["split"]["on_cpu"] == len(answer["fallbacks"])
    assert all(f["reason"] != "—" and "measured" in f["time evidence"] and "assumed" in f["time evidence"]
               for f in answer["fallbacks"])

    assert not drift.isError
    d = drift.structuredContent
    assert d["evidence"] == "measured" and d["outputs"] and all(o["evidence"] == "measured" for o in d["outputs"])

    assert not diff.isError
    assert diff.structuredContent["gate"] == {"verdict": "pass", "regressions": [], "regressions_left_out": 0}
    assert "Verdict: no regressions" in diff.structuredContent["text"]

    assert not repro.isError and repro.structuredContent["status"] == "no isolation"
    assert "xc repro vm --target ort-nnapi" in repro.structuredContent["how_to_get_one"]

    assert "ort-cpu, ort-nnapi" in _error_line(unknown)         # the run's targets, named
    for refused in (outside, linked, run_outside):
        assert "outside the folders this server may read" in _error_line(refused)
    assert "no such run" in _error_line(no_run)
    assert _error_line(bad_type) == "list_runs: bad arguments — limit: Input should be a valid integer, unable to " \
                                    "parse string as an integer"


def test_stdout_carries_only_the_protocol_and_a_read_only_analyze_writes_nothing_of_the_users(place, tmp_path):
    """A read-only server analyses into its scratch store: the same request again is answered from it at once,
    $XC_HOME stays empty, and the scratch is gone when the server stops. Every stdout line is a JSON-RPC message
    (torch's, ORT's and the workers' output goes to stderr)."""
    home, scratch_tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    scratch_tmp.mkdir()
    env = {**place["env"], "XC_HOME": str(home), "TMPDIR": str(scratch_tmp)}
    proc = subprocess.Popen([PYTHON, "-m", "xc_core", "mcp"], cwd=place["root"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def request(rid, method, params):
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + "\n")
        proc.stdin.flush()
        while True:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-2000:]
            message = json.loads(line)          # anything but a JSON-RPC message here breaks the client
            if message.get("id") == rid:
                return message["result"]

    try:
        request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "test", "version": "1"}})
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        args = {"name": "analyze", "arguments": {"path": "sample:vision-mini", "targets": ["ort-cpu"]}}
        first = request(2, "tools/call", args)
        assert not first["isError"], first
        assert first["structuredContent"]["cached"] is False
        assert first["structuredContent"]["verdicts"] == [{"target": "ort-cpu", "verdict": "✓ pass outputs match"}]
        started = time.monotonic()
        again = request(3, "tools/call", args)["structuredContent"]
        assert again["cached"] is True and again["key"] == first["structuredContent"]["key"]
        assert time.monotonic() - started < 5
        runs = request(4, "tools/call", {"name": "list_runs", "arguments": {}})["structuredContent"]["runs"]
        assert [r["key"] for r in runs] == [again["key"]] and runs[0]["origin"] == "mcp"
        assert os.listdir(home) == []
        assert any(n.startswith("xc-mcp-") for n in os.listdir(scratch_tmp))
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.stdout.read() == ""
    assert os.listdir(home) == []
    assert not [n for n in os.listdir(scratch_tmp) if n.startswith("xc-mcp-")]        # the scratch store is gone


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_on_loopback_checks_the_host_header(place):
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client
    port = _free_port()
    proc = subprocess.Popen([PYTHON, "-m", "xc_core", "mcp", "--http", "--port", str(port)], cwd=place["root"],
                            env=place["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        url = f"http://127.0.0.1:{port}/mcp"
        assert url in line, line + proc.stderr.read()[-2000:] if proc.poll() is not None else line

        async def go():
            async with streamablehttp_client(url) as (read, write, _):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    return (await s.list_tools()).tools, await s.call_tool("list_targets", {})
        tools, targets = asyncio.run(go())
        assert {t.name for t in tools} == TOOLS
        listed = {t["id"]: t for t in targets.structuredContent["targets"]}
        assert listed["ort-nnapi"]["placement_evidence"] == "predicted-runtime"
        assert listed["ort-cpu"]["available"] is True and listed["ort-cpu"]["runtime"] == "ONNX Runtime"

        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "page", "version": "1"}}}
        accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        # DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1
        foreign = httpx.post(url, json=hello, headers={**accept, "Host": f"evil.example:{port}"}, timeout=10)
        assert foreign.status_code == 421
        cross = httpx.post(url, json=hello, headers={**accept, "Origin": "http://evil.example"}, timeout=10)
        assert cross.status_code == 403
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not [n for n in os.listdir(place["tmp"]) if n.startswith("xc-mcp-")]     # scratch removed on SIGTERM


@pytest.mark.parametrize("argv, said", [
    (["--http", "--host", "0.0.0.0"], "--host 0.0.0.0: refused — the MCP server listens on loopback only"),
    (["--http", "--host", "192.168.1.5"], "--host 192.168.1.5: refused"),
    (["--root", "/no/such/folder"], "--root /no/such/folder: not a folder"),
])
def test_bad_flags_are_one_line(place, argv, said):
    done = subprocess.run([PYTHON, "-m", "xc_core", "mcp", *argv], cwd=place["root"], env=place["env"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


def test_answers_are_bounded_and_names_stay_one_printable_line(place):
    """A target with thousands of fallbacks answers with MAX_ROWS of them and says how many were left out; a node
    name carrying a newline and an escape sequence comes out as one printable line."""
    import copy

    from xc_core.mcp_server import answers
    from xc_core.review.runs import load_run
    base = load_run(place["run"]).report
    hostile = copy.deepcopy(base)
    victim = next(n for n in hostile["targets"]["ort-nnapi"]["graph"]["nodes"] if n.get("fallback"))
    victim["id"] = "evil\n\x1b[2Jnode"
    a = answers.fallbacks(hostile, "ort-nnapi")
    assert "evil \\x1b[2Jnode" in [f["node"] for f in a["fallbacks"]]
    assert "\x1b" not in answers.fallbacks_text(a) and "evil\n" not in answers.fallbacks_text(a)

    many = copy.deepcopy(base)
    nodes = many["targets"]["ort-nnapi"]["graph"]["nodes"]
    template = next(n for n in nodes if n.get("fallback"))
    for i in range(500):
        clone = copy.deepcopy(template)
        clone["id"] = f"clone_{i}"
        clone["outputs"] = [{**o, "name": f"clone_out_{i}"} for o in clone.get("outputs") or []]
        nodes.append(clone)
    a = answers.fallbacks(many, "ort-nnapi")
    total = 500 + sum(1 for n in base["targets"]["ort-nnapi"]["graph"]["nodes"] if n.get("fallback"))
    assert len(a["fallbacks"]) == answers.MAX_ROWS and a["fallbacks_left_out"] == total - answers.MAX_ROWS
    assert f"{total - answers.MAX_ROWS} more fallback nodes left out" in a["note"]
    assert len(json.dumps(a)) < 60_000


def test_allow_write_says_analyze_writes(place):
    async def body(s):
        return (await s.list_tools()).tools
    tools = _session(place, body, "--allow-write")
    hints = {t.name: t.annotations.readOnlyHint for t in tools}
    assert hints.pop("analyze") is False and set(hints.values()) == {True}
    analyze = next(t for t in tools if t.name == "analyze")
    assert "kept in xc's run store" in analyze.description


@pytest.mark.slow      # an analysis with --isolate (~20 s): the inner loop leaves it to tests/run.sh
def test_get_repro_hands_out_the_culprits_bundle(place, tmp_path):
    """A run whose culprit search found the exp that overflows float16 (`xc analyze --isolate`): the sentence, its
    evidence, BUG_REPORT.md, the script and the command, as the run folder holds them."""
    import numpy as np
    import torch
    from tiny_models import ExpOverflow

    from xc_core.review.runs import load_run
    from xc_core.views.isolation import culprit_entries
    torch.manual_seed(0)
    x = torch.randn(2, 8) * 3
    model, inputs = os.path.join(place["root"], "overflow.pt2"), os.path.join(place["root"], "inputs.npz")
    torch.export.save(torch.export.export(ExpOverflow().eval(), (x,)), model)
    np.savez(inputs, x=x.numpy())
    done = subprocess.run([PYTHON, "-m", "xc_core", "analyze", model, "--inputs", inputs, "--targets", "coreai-ane",
                           "--isolate", "--out", os.path.join(place["root"], "iso"), "--no-store", "--quiet"],
                          env=place["env"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    entry = culprit_entries(load_run(os.path.join(place["root"], "iso")).report)[0]

    async def body(s):
        return await s.call_tool("get_repro", {"run": "iso", "target": "coreai-ane"})
    got = _session(place, body).structuredContent
    assert got["status"] == "found" and got["sentence"] == entry["sentence"] and got["evidence"] == "emulated"
    assert got["bug_report"].startswith("# Core AI") and "Evidence: emulated" in got["bug_report"]
    assert got["script_name"] == "run_repro.py" and "import" in got["script"]
    assert {"BUG_REPORT.md", "run_repro.py", "model.pt2", "inputs.npz"} <= set(got["files"])
    assert got["command"].endswith("&& python run_repro.py")


def test_a_suggested_command_names_the_run_as_one_shell_word():
    """get_repro suggests `xc repro RUN …`: a stored run by its id, a folder quoted for the shell, and a folder whose
    name a command line cannot show (a newline) never as a command that would name another folder."""
    import shlex
    from types import SimpleNamespace

    from xc_core.mcp_server.answers import _shell_ref
    assert _shell_ref(SimpleNamespace(key="0123456789abcdef"), "whatever") == "0123456789ab"
    assert shlex.split(_shell_ref(SimpleNamespace(key=None), 'runs/a"b) $(x)')) == ['runs/a"b) $(x)']
    assert "RUN" in _shell_ref(SimpleNamespace(key=None), "run\nq") and "\n" not in _shell_ref(
        SimpleNamespace(key=None), "run\nq")
