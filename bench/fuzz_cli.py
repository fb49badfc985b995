"""Hostile input for the commands that read what CI hands them: batch shard folders (`xc batch merge`), batch
manifests (`xc batch`), fleet matrices (`xc diff`, `--gate`, `merge`), GitHub Actions event files and GitHub API
answers (`xc comment`), and model names that carry terminal escapes (`xc analyze` with --md/--html).

Each case runs the real CLI (`xc_core.cli.main`, in this process) and is judged on everything it printed and
wrote, not on its exit code alone:

- *secret leaked*: a secret appears in stdout, stderr or a file the command wrote — the fuzz process's
  GITHUB_TOKEN, a line of its own `/proc/self/environ`, or the canary text of a folder outside the input's root;
  an output that holds a symlink counts too (an artifact upload would follow it). A request that reached the
  "other" server of the API cases counts as a leak whatever it carried.
- *traceback* / *internal error*: Python's traceback header, or xc's "internal error" line, anywhere in the output.
- *raw escape*: an ESC, BEL or right-to-left override character left raw in what the command printed or in a
  Markdown/HTML file it wrote (JSON escapes them itself).
- *long message*: a refusal (exit 2) of more than one line.

bench/fuzz.py registers these families beside its own and counts these columns for them.
"""
from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FUZZ_TOKEN = "ghp_fuzzT0kenThatMustNeverBeShown0123456789"
OUTSIDE_CANARY = "OUTSIDE-CANARY-the-merge-read-a-folder-it-was-not-given"
RAW_ESCAPES = ("\x1b", "\x07", "\u202e")
HOSTILE_TEXT = ["\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "evil\u202etxt.onnx", "@everyone [l](http://evil.example/x)",
                "\x1b[31mred\x1b[0m", "<img src=x onerror=alert(1)>", "a|b`c*d_"]


# ----------------------------------------------------------------------------------------------- running ----
def run_cli(argv: list[str], env: dict | None = None, outputs: tuple[str, ...] = (), secrets: list[str] = (),
            ok_codes: tuple[int, ...] = (0,)) -> dict:
    """`xc ARGV` in this process with `env` set for the call; its outcome judged (see the module docstring)."""
    from xc_core.cli import main
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(argv))
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
            except BaseException as e:  # noqa: BLE001 — exactly what this hunts
                return {"crash": f"{argv[0]}: {type(e).__name__}: {e}"[:200]}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    printed = out.getvalue() + err.getvalue()
    written = _written(outputs)
    outcome: dict = {}
    if "Traceback (most recent call last)" in printed:
        outcome["traceback"] = f"{argv[0]}: {printed[-160:]!r}"
    if "internal error" in printed:
        outcome["internal error"] = f"{argv[0]}: {err.getvalue().strip()[:160]!r}"
    leaks = [s[:24] for s in secrets if s and (s in printed or any(s in text for text in written.values()))]
    leaks += [f"symlink {p}" for p in written if written[p] is None]
    if leaks:
        outcome["secret leaked"] = f"{argv[0]}: {leaks[:3]}"
    raw = [repr(ch) for ch in RAW_ESCAPES
           if ch in printed or any(ch in text for p, text in written.items()
                                   if text is not None and p.endswith((".md", ".html", ".txt")))]
    if raw:
        outcome["raw escape"] = f"{argv[0]}: {raw}"
    if rc == 2:
        outcome["refused"] = err.getvalue().strip()
    elif rc in ok_codes:
        outcome["report"] = {"targets": {}}
    else:
        outcome["crash"] = f"{argv[0]} exit {rc}: {err.getvalue().strip()[:160]}"
    return outcome


def _written(roots: tuple[str, ...]) -> dict[str, str | None]:
    """Every file under the output roots, as text (None for a symlink, which is never followed here)."""
    files: dict[str, str | None] = {}
    for root in roots:
        if os.path.islink(root):
            files[root] = None
            continue
        if os.path.isfile(root):
            files[root] = _text(root)
            continue
        for folder, dirs, names in os.walk(root):
            for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                path = os.path.join(folder, name)
                files[path] = None if os.path.islink(path) else _text(path)
    return files


def _text(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(64 << 20)
    except OSError:
        return ""
    try:
        return gzip.decompress(data).decode("utf-8", "replace") if data[:2] == b"\x1f\x8b" else \
            data.decode("utf-8", "replace")
    except (OSError, EOFError):
        return data.decode("utf-8", "replace")


def secrets_of_this_process(ctx) -> list[str]:
    """What must never reach an output: the token, the outside folder's canary, and one whole line of this
    process's own /proc/self/environ (what a symlink to it would copy)."""
    found = [FUZZ_TOKEN, OUTSIDE_CANARY]
    try:
        with open("/proc/self/environ", "rb") as f:
            lines = [x.decode("utf-8", "replace") for x in f.read().split(b"\0") if x]
        found += [x for x in lines if x.startswith(("PATH=", "GITHUB_TOKEN="))] or lines[:1]
    except OSError:
        pass
    return found


def outside_folder(ctx) -> str:
    """A folder outside every input's root, with a canary file and a report.json a trick may point at."""
    if getattr(ctx, "outside", None) is None:
        ctx.outside = os.path.join(ctx.tmp, "outside")
        os.makedirs(ctx.outside, exist_ok=True)
        with open(os.path.join(ctx.outside, "canary.txt"), "w") as f:
            f.write(OUTSIDE_CANARY)
        with open(os.path.join(ctx.outside, "report.json"), "w") as f:
            json.dump({"canary": OUTSIDE_CANARY}, f)
    return ctx.outside


def _fifo(path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.mkfifo(path)
    return path


def _relu_onnx(path: str, names: list[str] | None = None) -> str:
    """A one-node ONNX model; `names` (node, input, output, op's graph name) may carry hostile text."""
    from onnx import TensorProto, helper
    node, x, y, graph = (names or ["relu", "x", "y", "g"]) + ["g"] * (4 - len(names or ["", "", "", ""]))
    g = helper.make_graph([helper.make_node("Relu", [x], [y], name=node)], graph,
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


# ------------------------------------------------------------------------------------------ seed matrix ----
def seed_batch(ctx) -> str:
    """A real `xc batch` output (one tiny model, ort-cpu, not stored), made once per fuzz run: the shard every
    merge and matrix case starts from."""
    if getattr(ctx, "batch_seed", None) is None:
        folder = os.path.join(ctx.tmp, "batch-seed")
        os.makedirs(folder)
        _relu_onnx(os.path.join(folder, "tiny.onnx"))
        manifest = os.path.join(folder, "models.txt")
        with open(manifest, "w") as f:
            f.write("tiny.onnx\n")
        out = os.path.join(folder, "out")
        result = run_cli(["batch", manifest, "--out", out, "--targets", "ort-cpu", "--no-store", "--quiet"])
        if "report" not in result or not os.path.isfile(os.path.join(out, "matrix.json")):
            raise RuntimeError(f"the seed batch failed: {result}")
        ctx.batch_seed = out
    return ctx.batch_seed


def _shard_copy(ctx, name: str) -> str:
    dest = os.path.join(tempfile.mkdtemp(dir=ctx.tmp), name)
    shutil.copytree(seed_batch(ctx), dest, symlinks=True)
    return dest


# --------------------------------------------------------------------------------------------- families ----
MERGE_TRICKS = ["environ-file", "outside-folder", "runs-entry-outside", "report-is-environ", "fifo",
                "report-traversal", "report-absolute", "nested-link-outside", "dev-zero", "matrix-is-environ",
                "socket", "self-loop"]


def family_merge_trees(ctx, n):
    """Shard folders with symlinks to /proc/self/environ and to an outside folder, FIFOs, devices and report paths
    that leave the shard, through `xc batch merge`: nothing of them may reach the merged --out."""
    for i in range(n):
        yield "matrix.json", b"", {"cli": lambda folder, trick=MERGE_TRICKS[i % len(MERGE_TRICKS)]:
                                   _merge_case(ctx, folder, trick)}


def _merge_case(ctx, folder: str, trick: str) -> dict:
    outside = outside_folder(ctx)
    shard = _shard_copy(ctx, "shard")
    runs = os.path.join(shard, "runs")
    tiny = os.path.join(runs, os.listdir(runs)[0])
    matrix_path = os.path.join(shard, "matrix.json")
    matrix = json.load(open(matrix_path))
    row = matrix["models"][0]
    if trick == "environ-file":
        os.symlink("/proc/self/environ", os.path.join(tiny, "environ.txt"))
    elif trick == "outside-folder":
        os.symlink(outside, os.path.join(runs, "evil"))
        matrix["models"].append({**row, "name": "evil", "report": "runs/evil/report.json", "runs": {}})
    elif trick == "runs-entry-outside":
        shutil.rmtree(tiny)
        os.symlink(outside, tiny)
    elif trick == "report-is-environ":
        os.remove(os.path.join(tiny, "report.json"))
        os.symlink("/proc/self/environ", os.path.join(tiny, "report.json"))
    elif trick == "fifo":
        _fifo(os.path.join(tiny, "pipe"))
    elif trick == "report-traversal":
        row["report"] = "runs/../../../" + os.path.relpath(os.path.join(outside, "report.json"), "/")
    elif trick == "report-absolute":
        row["report"] = os.path.join(outside, "report.json")
        row["runs"] = {row.get("run") or "x": os.path.join(outside, "report.json")}
    elif trick == "nested-link-outside":
        os.makedirs(os.path.join(tiny, "sub"), exist_ok=True)
        os.symlink("../../../../" + os.path.relpath(outside, "/"), os.path.join(tiny, "sub", "deep"))
    elif trick == "dev-zero":
        os.symlink("/dev/zero", os.path.join(tiny, "zero.bin"))
    elif trick == "matrix-is-environ":
        os.remove(matrix_path)
        os.symlink("/proc/self/environ", matrix_path)
    elif trick == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(os.path.join(tiny, "sock"))
        s.close()
    elif trick == "self-loop":
        os.symlink("loop", os.path.join(tiny, "loop"))
    if not os.path.islink(matrix_path):
        json.dump(matrix, open(matrix_path, "w"))
    out = os.path.join(folder, "merged")
    return run_cli(["batch", "merge", shard, "--out", out], outputs=(out,), secrets=secrets_of_this_process(ctx))


def family_matrix_imports(ctx, n):
    """Crafted matrix.json files (wrong types anywhere, keys removed, hostile names, nesting 100,000 deep, NaN,
    bytes that are not UTF-8) through `xc diff`, `xc diff --gate` and `xc batch merge`."""
    for i in range(n):
        yield "matrix.json", b"", {"cli": lambda folder, i=i: _matrix_case(ctx, folder, i)}


def _matrix_case(ctx, folder: str, i: int) -> dict:
    from hostile_names import payloads
    seed_dir = seed_batch(ctx)
    seed = json.load(open(os.path.join(seed_dir, "matrix.json")))
    odd = [None, -1, 10 ** 30, 1e308, "", [], {}, [[[]]], True, "x" * 10_000, {"a": [None]}, 5, "../../etc"]
    crafted = os.path.join(folder, "crafted")
    os.makedirs(crafted)
    kind = i % 6
    if kind == 0:
        data = ('{"schema":"xc-matrix/1","models":' + "[" * 100_000 + "]" * 100_000 + ',"cells":[]}').encode()
    elif kind == 1:
        data = b'{"schema":"xc-matrix/1","models":[],"cells":[{"model":"\xff\xfe","target":NaN}]}'
    else:
        m = copy.deepcopy(seed)
        paths = _paths(m)
        for _ in range(ctx.rng.randint(1, 5)):
            path = ctx.rng.choice(paths)
            try:
                parent = m
                for k in path[:-1]:
                    parent = parent[k]
                if kind == 2:
                    parent[path[-1]] = ctx.rng.choice(odd)
                elif kind == 3 and isinstance(parent, dict):
                    del parent[path[-1]]
                elif kind == 4:
                    parent[path[-1]] = ctx.rng.choice(payloads(ctx.canary) + HOSTILE_TEXT)
                else:
                    parent[path[-1]] = [parent[path[-1]]] * 3 if ctx.rng.random() < 0.5 else {"v": parent[path[-1]]}
            except (KeyError, IndexError, TypeError):
                continue
        data = json.dumps(m).encode()
    with open(os.path.join(crafted, "matrix.json"), "wb") as f:
        f.write(data)
    secrets = secrets_of_this_process(ctx)
    for argv, codes in ((["diff", seed_dir, crafted], (0,)), (["diff", seed_dir, crafted, "--gate"], (0, 1)),
                        (["batch", "merge", seed_dir, crafted, "--out", os.path.join(folder, "merged")], (0,))):
        outcome = run_cli(argv, outputs=(os.path.join(folder, "merged"),), secrets=secrets, ok_codes=codes)
        if "report" not in outcome:
            return outcome
    return outcome


def _paths(value, prefix=()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out += _paths(v, prefix + (i,))
    return out


MANIFEST_TRICKS = ["laughs-shape", "laughs-options", "deep-nesting", "bom", "proc-mem", "dev-zero", "fifo",
                   "python-tag", "hostile-name", "not-utf8", "manifest-is-environ", "folder-links", "wrong-types"]


def family_manifests(ctx, n):
    """Batch manifests that try to exhaust memory (YAML anchors), read special files (/proc/self/mem, /dev/zero,
    FIFOs, /proc/self/environ as the manifest itself), escape their folder by symlink, or carry hostile names. No
    case names a readable model, so nothing is compiled."""
    for i in range(n):
        yield "models.yaml", b"", {"cli": lambda folder, trick=MANIFEST_TRICKS[i % len(MANIFEST_TRICKS)]:
                                   _manifest_case(ctx, folder, trick)}


def _laughs(under: str) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for k in "bcdefghij":
        prev = chr(ord(k) - 1)
        lines.append(f"{k}: &{k} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]")
    return "\n".join(lines) + f"\nmodels:\n  - source: missing.onnx\n    {under}: {{x: *j}}\n"


def _manifest_case(ctx, folder: str, trick: str) -> dict:
    outside = outside_folder(ctx)
    manifest = os.path.join(folder, "models.yaml")
    text: str | bytes | None = None
    if trick == "laughs-shape":
        text = _laughs("shape")
    elif trick == "laughs-options":
        text = _laughs("options")
    elif trick == "deep-nesting":
        text = "models: " + "[" * 50_000 + "]" * 50_000 + "\n"
    elif trick == "bom":
        manifest = os.path.join(folder, "models.txt")
        text = "\ufeffmissing-first.onnx\nmissing-second.onnx\n"
    elif trick == "proc-mem":
        text = "models:\n  - /proc/self/mem\n"
    elif trick == "dev-zero":
        text = "models:\n  - source: /dev/zero\n    name: zero\n"
    elif trick == "fifo":
        text = f"models:\n  - {_fifo(os.path.join(folder, 'pipe.onnx'))}\n"
    elif trick == "python-tag":
        text = f"models:\n  - !!python/object/apply:os.system ['touch {ctx.canary}']\n"
    elif trick == "hostile-name":
        text = "models:\n" + "".join(f"  - source: missing{k}.onnx\n    name: {json.dumps(t)}\n"
                                     for k, t in enumerate(HOSTILE_TEXT))
    elif trick == "not-utf8":
        text = b"models:\n  - \xff\xfe\x00bad.onnx\n"
    elif trick == "manifest-is-environ":
        manifest = "/proc/self/environ"
    elif trick == "folder-links":
        manifest = os.path.join(folder, "models")
        os.makedirs(manifest)
        os.symlink("/proc/self/environ", os.path.join(manifest, "env.onnx"))
        os.symlink(os.path.join(outside, "canary.txt"), os.path.join(manifest, "canary.onnx"))
        os.symlink(outside, os.path.join(manifest, "outside.mlpackage"))
    else:
        text = ctx.rng.choice(["models: 5\n", "models: {a: b}\n", "targets: 7\nmodels: [a.onnx]\n",
                               "models:\n  - {source: [1, 2]}\n", "models:\n  - {source: a.onnx, shape: [1, 2]}\n",
                               "models:\n  - {source: a.onnx, options: {ort-cpu.level: {x: 1}}}\n"])
    if text is not None:
        with open(manifest, "wb") as f:
            f.write(text.encode() if isinstance(text, str) else text)
    out = os.path.join(folder, "out")
    return run_cli(["batch", manifest, "--out", out, "--targets", "ort-cpu", "--no-store", "--quiet"],
                   outputs=(out,), secrets=secrets_of_this_process(ctx))


EVENT_TRICKS = ["dev-zero", "fifo", "environ", "huge", "deep", "not-json", "number-types", "not-a-pr",
                "folder", "unreachable-api"]


def family_event_files(ctx, n):
    """GITHUB_EVENT_PATH pointing at /dev/zero, a FIFO, /proc/self/environ, 100 MB, 100,000-deep JSON, numbers of
    every wrong type, a folder — and a valid event with an API address where nothing listens — through
    `xc comment`: one line each, the token never shown."""
    for i in range(n):
        yield "event.json", b"", {"cli": lambda folder, trick=EVENT_TRICKS[i % len(EVENT_TRICKS)]:
                                  _event_case(ctx, folder, trick)}


def _event_case(ctx, folder: str, trick: str) -> dict:
    body = os.path.join(folder, "comment.md")
    with open(body, "w") as f:
        f.write("# a report\n")
    event = os.path.join(folder, "event.json")
    if trick == "dev-zero":
        event = "/dev/zero"
    elif trick == "fifo":
        event = _fifo(os.path.join(folder, "event.pipe"))
    elif trick == "environ":
        event = "/proc/self/environ"
    elif trick == "huge":
        with open(event, "wb") as f:
            f.write(b'{"pull_request": {"number": 7}, "pad": "' + b"x" * (100 << 20) + b'"}')
    elif trick == "deep":
        with open(event, "w") as f:
            f.write('{"pull_request":' + "[" * 100_000 + "]" * 100_000 + "}")
    elif trick == "not-json":
        with open(event, "wb") as f:
            f.write(b"\x00\xffnot json")
    elif trick == "number-types":
        with open(event, "w") as f:
            json.dump({"pull_request": {"number": ctx.rng.choice([1e300, -3, True, "7", [7], None, 2 ** 80])}}, f)
    elif trick == "not-a-pr":
        with open(event, "w") as f:
            json.dump({"issue": {"number": 3}, "push": HOSTILE_TEXT}, f)
    elif trick == "folder":
        event = folder
    else:
        with open(event, "w") as f:
            json.dump({"pull_request": {"number": 7}}, f)
    closed = _closed_port()
    env = {"GITHUB_EVENT_PATH": event, "GITHUB_TOKEN": FUZZ_TOKEN, "GITHUB_REPOSITORY": "octo/demo",
           "GITHUB_API_URL": f"http://127.0.0.1:{closed}"}
    return run_cli(["comment", body], env=env, secrets=secrets_of_this_process(ctx))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- a hostile GitHub API ---------------------------------------------------------------------------------------
API_TRICKS = ["backslash-link", "userinfo-link", "scheme-relative-link", "redirect", "gzip-bomb", "huge-body",
              "escapes-and-token", "token-late-in-message", "not-json", "wrong-types", "endless-pages",
              "link-with-newline", "denied-with-token", "answer-with-escapes"]


def family_api_answers(ctx, n):
    """A loopback server that answers `xc comment` the way a hostile or broken GitHub could: pagination links and
    redirects to another server (which must receive nothing), a gzip bomb, 64 MB of body, messages that echo the
    token or carry terminal escapes, answers of the wrong type, pages without end."""
    for i in range(n):
        yield "comment.md", b"", {"cli": lambda folder, trick=API_TRICKS[i % len(API_TRICKS)]:
                                  _api_case(ctx, folder, trick)}


class _HostileApi(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status: int, data: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            pass

    def _handle(self):
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        server.seen.append((self.command, self.path, self.headers.get("Authorization")))
        if server.other:                 # the server a trick points at: it must never be asked anything
            return self._send(200, b"[]")
        trick, api, other = server.trick, server.api_url, server.other_url
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        path = self.path.split("?")[0]
        if trick.endswith("-link") and self.command == "GET":
            link = {"backslash-link": f"{other}\\@{api.removeprefix('http://')}{path}?page=2",
                    "userinfo-link": f"http://x@{other.removeprefix('http://')}{path}?page=2",
                    "scheme-relative-link": f"//{other.removeprefix('http://')}{path}?page=2",
                    "link-with-newline": f"{api}{path}?page=2\n\t{other}"}[trick]
            return self._send(200, b"[]", {"Link": f'<{link}>; rel="next"'})
        if trick == "redirect":
            return self._send(307, b"{}", {"Location": f"{other}{path}"})
        if trick == "gzip-bomb":
            return self._send(200, _gzip_bomb(), {"Content-Encoding": "gzip"})
        if trick == "huge-body":
            return self._send(200, b"[" + b" " * (64 << 20) + b"]")
        if trick == "escapes-and-token":
            return self._send(500, json.dumps({"message": "\x1b]0;pwned\x07\x1b[2J broke: " + token}).encode())
        if trick == "token-late-in-message":
            return self._send(422, json.dumps({"message": "x" * 190 + token + " tail"}).encode())
        if trick == "not-json":
            return self._send(200, b"\x00\xff<html>not json")
        if trick == "wrong-types":
            if self.command == "GET":
                return self._send(200, json.dumps([{"id": "7", "body": 5}, 3, None, {"id": True}]).encode())
            return self._send(201, json.dumps(["not", "a", "comment"]).encode())
        if trick == "endless-pages":
            return self._send(200, b"[]", {"Link": f'<{api}{path}?page={len(server.seen) + 1}>; rel="next"'})
        if trick == "denied-with-token":
            return self._send(403, json.dumps({"message": f"token {token} may not \x1b[31mwrite\x1b[0m"}).encode())
        if self.command == "GET":
            return self._send(200, b"[]")
        return self._send(201, json.dumps({"id": 9, "html_url": "https://x/\x1b]0;t\x07\u202e"}).encode())

    do_GET = do_POST = do_PATCH = _handle


_BOMB: list[bytes] = []


def _gzip_bomb() -> bytes:
    """256 MiB of JSON in about 250 KB of gzip, made once."""
    if not _BOMB:
        _BOMB.append(gzip.compress(b"[" + b" " * (256 << 20) + b"]", compresslevel=9))
    return _BOMB[0]


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that hangs up mid-answer (xc refusing a bomb) is expected: socketserver would print a traceback
        to sys.stderr, which the case captures as the CLI's own."""


@contextlib.contextmanager
def _hostile_api(trick: str):
    servers = []
    for other in (False, True):
        s = _QuietServer(("127.0.0.1", 0), _HostileApi)
        s.trick, s.other, s.seen = trick, other, []
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(s)
    api, other = servers
    for s in servers:
        s.api_url = f"http://127.0.0.1:{api.server_address[1]}"
        s.other_url = f"http://127.0.0.1:{other.server_address[1]}"
    try:
        yield api, other
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def _api_case(ctx, folder: str, trick: str) -> dict:
    body = os.path.join(folder, "comment.md")
    with open(body, "w") as f:
        f.write("# a report\n")
    with _hostile_api(trick) as (api, other):
        env = {"GITHUB_TOKEN": FUZZ_TOKEN, "GITHUB_REPOSITORY": "octo/demo", "GITHUB_API_URL": api.api_url}
        started = time.monotonic()
        outcome = run_cli(["comment", body, "--pr", "7"], env=env, secrets=secrets_of_this_process(ctx))
        if other.seen:
            outcome["secret leaked"] = f"comment/{trick}: the other server was asked {other.seen[0][:2]}"
        if time.monotonic() - started > 120:
            outcome["crash"] = f"comment/{trick}: took {time.monotonic() - started:.0f} s"
    return outcome


def family_terminal_names(ctx, n):
    """A model whose node, input, output and graph names carry terminal escapes, a right-to-left override and a
    live mention, through `xc analyze --md --html`: none of it raw on the terminal or in the files."""
    for i in range(n):
        yield "names.onnx", b"", {"cli": lambda folder, i=i: _terminal_case(ctx, folder, i)}


def _terminal_case(ctx, folder: str, i: int) -> dict:
    pick = [HOSTILE_TEXT[(i + k) % len(HOSTILE_TEXT)] + f"-{k}" for k in range(4)]
    model = _relu_onnx(os.path.join(folder, "names.onnx"), pick)
    out = os.path.join(folder, "out")
    return run_cli(["analyze", model, "--targets", "ort-cpu", "--out", out, "--md", os.path.join(out, "r.md"),
                    "--html", os.path.join(out, "r.html"), "--no-store"], outputs=(out,),
                   secrets=secrets_of_this_process(ctx))


FAMILIES = {"merge trees": family_merge_trees, "matrix imports": family_matrix_imports,
            "manifests": family_manifests, "event files": family_event_files, "api answers": family_api_answers,
            "names on the terminal": family_terminal_names}
SCALE = {"names on the terminal": 0.25, "matrix imports": 0.75}
