"""Fleet batches: `xc batch` over a manifest of small models against the same models analysed one at a time with
`xc analyze`, for the local backend and for Ray, and Ray's own per-task cost.

    python bench/fleet.py [--models 20] [--targets ort-cpu,openvino-cpu,ort-nnapi,ort-cpu-int8] [--repeat 1]
                          [--skip-single] [--skip-ray] [--no-store] [--json FILE] [--added-target T]

The models are built in code with seeded weights in a temp folder (nothing is downloaded): MLPs of several widths
and depths, small convnets (BatchNorm, ReLU, pooling, depthwise, residual, 1-D), a tiny attention block and an
nn.MultiheadAttention one, two models with two outputs, two with a dynamic batch dim, an embedding over int64
tokens, an upsampling decoder and a gated MLP — as ExportedProgram .pt2 (torch.export.save) or .onnx (the dynamo
exporter) — plus the three bundled samples. More than 20 repeats the built ones with other seeds.

Every measured run is a fresh `xc` process with a fresh $XC_HOME (nothing cached, no run store shared):
- single runs: `xc analyze MODEL --targets T --quiet --no-store`, one model after another; each wall and the sum.
- batch local / batch ray: `xc batch MANIFEST --backend local|ray --quiet` (the run store on, as users run it, in
  the fresh $XC_HOME; --no-store passes --no-store to the batches too), its wall time against the ideal
  (sum of single walls) / cores; the goal is ≤ 1.15×. matrix.json is checked for models × targets cells.
  Two things pull that ratio in opposite directions: a single run already compiles its targets side by side
  (--jobs defaults to the cores), which the ideal ignores; and each single run starts a process (imports, its
  worker pool) that a batch starts once. So the summary also gives each batch's packing: its wall against the
  sum of its own models' analysis seconds (matrix.json's per-model `seconds`) / cores — how well it fills the
  cores, Ray's start and stop included for the Ray backend.
With --repeat K the three kinds alternate order each repeat (so all see the same machine load) and every figure
is the median over repeats; each batch's ratio is taken against the single runs of its own repeat.

Ray's per-task cost is measured in one fresh process: `import ray`, ray.init(num_cpus=cores,
include_dashboard=False, log_to_driver=False) on a new local instance, the first no-op task (its worker's start),
then the median round trip of --ray-tasks no-op tasks and of as many tasks returning 1 MiB of bytes, each submitted
alone and ray.get before the next, and ray.shutdown().

With --added-target T, a fleet that gains a target: in a fresh $XC_HOME the batch over --targets, then the same
batch over --targets plus T (timed: it compiles only T and takes the other cells from the store), against a batch
over --targets plus T in another fresh $XC_HOME (everything compiled); per repeat, side by side, medians.

The machine may be shared and noisy: the load average at the start and end is printed beside the figures.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]
DEFAULT_TARGETS = "ort-cpu,openvino-cpu,ort-nnapi,ort-cpu-int8"
GOAL = 1.15                      # a batch's wall / (sum of single walls / cores)
SINGLE_TIMEOUT_S = 900           # a hung run fails the bench instead of holding it forever
BATCH_TIMEOUT_S = 3600


# ------------------------------------------------------------------------------------------------ the models
def _catalogue():
    """[(name, format, factory)], factory() -> (module, example args, dynamic_shapes or None; a tuple beside the
    args). The caller seeds torch before calling a factory, so weights and inputs are reproducible. Names are the
    files' stems, hence the models' names in the matrix; a `sample:` entry has no factory. Formats alternate so a
    prefix (--models 5) still mixes .pt2, .onnx and samples."""
    import torch
    from torch import nn
    from torch.export import Dim

    def mlp(widths, act):
        layers = []
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), act()]
        return nn.Sequential(*layers[:-1])           # no activation after the last layer

    def conv_bn(cin, cout, k, stride=1, groups=1, act=nn.ReLU):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(cout), act())

    class NormMLP(nn.Module):                        # pre-LayerNorm residual MLP blocks
        def __init__(self, d=48, blocks=3):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.SiLU(),
                                                      nn.Linear(2 * d, d)) for _ in range(blocks))
            self.head = nn.Linear(d, 6)

        def forward(self, x):
            for b in self.blocks:
                x = x + b(x)
            return self.head(x)

    class Residual(nn.Module):                       # conv-BN-ReLU-conv-BN + skip, ReLU
        def __init__(self, ch):
            super().__init__()
            self.a, self.b = conv_bn(ch, ch, 3), nn.Sequential(nn.Conv2d(ch, ch, 3, padding=1, bias=False),
                                                               nn.BatchNorm2d(ch))

        def forward(self, x):
            return torch.relu(x + self.b(self.a(x)))

    class Attention(nn.Module):                      # one head written out: q·kᵀ/√d, softmax, ·v, residual + norm
        def __init__(self, d=32):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.norm, self.scale = nn.LayerNorm(d), d ** -0.5

        def forward(self, x):
            w = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2) * self.scale, dim=-1)
            return self.norm(x + self.o(w @ self.v(x)))

    class MHABlock(nn.Module):                       # nn.MultiheadAttention + a GELU feed-forward
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

        def forward(self, x):
            x = self.n1(x + self.attn(x, x, x, need_weights=False)[0])
            return self.n2(x + self.ff(x))

    class TwoHeads(nn.Module):                       # a shared trunk, class probabilities and a regression
        def __init__(self):
            super().__init__()
            self.trunk = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
            self.cls, self.reg = nn.Linear(64, 5), nn.Linear(64, 2)

        def forward(self, x):
            h = self.trunk(x)
            return torch.softmax(self.cls(h), dim=-1), self.reg(h)

    class SegAndClass(nn.Module):                    # a conv trunk, a per-pixel map and pooled logits
        def __init__(self):
            super().__init__()
            self.trunk = nn.Sequential(conv_bn(3, 12, 3), conv_bn(12, 12, 3))
            self.seg, self.cls = nn.Conv2d(12, 3, 1), nn.Linear(12, 4)

        def forward(self, x):
            h = self.trunk(x)
            return self.seg(h), self.cls(h.mean(dim=(2, 3)))

    class TokenBag(nn.Module):                       # int64 tokens: embedding, mean over the sequence, linear
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.Embedding(200, 16), nn.Linear(16, 3)

        def forward(self, tokens):
            return self.head(self.emb(tokens).mean(dim=1))

    class Gated(nn.Module):                          # chunk, a·sigmoid(b), concat with the input
        def __init__(self, d=32):
            super().__init__()
            self.up, self.out = nn.Linear(d, 2 * d), nn.Linear(2 * d, 8)

        def forward(self, x):
            a, b = self.up(x).chunk(2, dim=-1)
            return self.out(torch.cat([x, a * torch.sigmoid(b)], dim=-1))

    def image(c=3, hw=32, n=1):
        return (torch.randn(n, c, hw, hw),)

    def batch_dim():
        return Dim("batch", min=1, max=64)

    return [
        ("vision-mini", "sample", None),
        ("mlp-narrow", "pt2", lambda: (mlp([16, 32, 4], nn.ReLU), (torch.randn(1, 16),), None)),
        ("mlp-wide", "onnx", lambda: (mlp([64, 512, 512, 10], nn.GELU), (torch.randn(1, 64),), None)),
        ("cnn-bn", "pt2", lambda: (nn.Sequential(conv_bn(3, 8, 3), nn.MaxPool2d(2), conv_bn(8, 16, 3),
                                                 nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                                 nn.Linear(16, 10)), image(), None)),
        ("cnn-depthwise", "onnx", lambda: (nn.Sequential(conv_bn(3, 16, 3, 2, act=nn.ReLU6),
                                                         conv_bn(16, 16, 3, groups=16, act=nn.ReLU6),
                                                         conv_bn(16, 32, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1),
                                                         nn.Flatten(), nn.Linear(32, 10)), image(hw=48), None)),
        ("attention", "pt2", lambda: (Attention(), (torch.randn(1, 8, 32),), None)),
        ("two-outputs", "onnx", lambda: (TwoHeads(), (torch.randn(1, 20),), None)),
        ("tts-mini", "sample", None),
        ("dynamic-batch-mlp", "pt2", lambda: (mlp([24, 48, 48, 6], nn.ReLU), (torch.randn(4, 24),),
                                              ({0: batch_dim()},))),
        ("mlp-norm", "onnx", lambda: (NormMLP(), (torch.randn(2, 48),), None)),
        ("cnn-residual", "pt2", lambda: (nn.Sequential(conv_bn(3, 16, 3, 2), Residual(16), Residual(16),
                                                       nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)),
                                         image(), None)),
        ("cnn-1d", "onnx", lambda: (nn.Sequential(nn.Conv1d(4, 16, 5, padding=2), nn.BatchNorm1d(16), nn.ReLU(),
                                                  nn.MaxPool1d(2), nn.Conv1d(16, 16, 3, padding=1),
                                                  nn.BatchNorm1d(16), nn.ReLU(), nn.AdaptiveAvgPool1d(1),
                                                  nn.Flatten(), nn.Linear(16, 5)), (torch.randn(1, 4, 64),), None)),
        ("two-outputs-cnn", "pt2", lambda: (SegAndClass(), image(hw=24), None)),
        ("attention-mha", "onnx", lambda: (MHABlock(), (torch.randn(1, 10, 32),), None)),
        ("transformer-mini", "sample", None),
        ("mlp-deep", "pt2", lambda: (mlp([32] * 11, nn.Tanh), (torch.randn(4, 32),), None)),
        ("dynamic-batch-cnn", "onnx", lambda: (nn.Sequential(conv_bn(3, 8, 3), nn.MaxPool2d(2), conv_bn(8, 8, 3),
                                                             nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                                             nn.Linear(8, 4)), image(n=2, hw=16),
                                               ({0: batch_dim()},))),
        ("token-bag", "pt2", lambda: (TokenBag(), (torch.randint(0, 200, (1, 12)),), None)),
        ("upsample", "onnx", lambda: (nn.Sequential(conv_bn(3, 8, 3, 2), nn.Upsample(scale_factor=2),
                                                    nn.Conv2d(8, 3, 3, padding=1), nn.Sigmoid()), image(), None)),
        ("gated", "pt2", lambda: (Gated(), (torch.randn(2, 32),), None)),
    ]


def build_models(folder: str, count: int) -> list[dict]:
    """`count` models in `folder` (or sample: sources): [{name, source, format}], in manifest order."""
    import torch
    catalogue = _catalogue()
    built = [c for c in catalogue if c[1] != "sample"]
    plan = [(name, fmt, factory, 0) for name, fmt, factory in catalogue[:count]]
    for i in range(max(0, count - len(catalogue))):              # beyond the catalogue: built ones, other seeds
        name, fmt, factory = built[i % len(built)]
        plan.append((f"{name}-s{1 + i // len(built)}", fmt, factory, 1 + i // len(built)))
    out = []
    for index, (name, fmt, factory, seed) in enumerate(plan):
        if fmt == "sample":
            out.append({"name": name, "source": f"sample:{name}", "format": "sample"})
            continue
        torch.manual_seed(1000 * seed + index)                  # weights and example inputs, per model
        module, args, dynamic = factory()
        module.eval()
        path = os.path.join(folder, f"{name}.{fmt}")
        with torch.no_grad():
            if fmt == "pt2":
                torch.export.save(torch.export.export(module, args, dynamic_shapes=dynamic), path)
            else:
                # The dynamo exporter narrates each step on stdout and warns about opset choices; shown only
                # when it fails. One self-contained file (no external .data) so the manifest lists one path.
                # Its logger (torchvision ops it skips) bound stderr at import, so it is quieted by level.
                noise = io.StringIO()
                onnx_log = logging.getLogger("torch.onnx")
                level = onnx_log.level
                onnx_log.setLevel(logging.ERROR)
                try:
                    with contextlib.redirect_stdout(noise), contextlib.redirect_stderr(noise), \
                            warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        torch.onnx.export(module, args, path, dynamo=True, dynamic_shapes=dynamic,
                                          external_data=False)
                except Exception:
                    sys.stderr.write(noise.getvalue()[-3000:])
                    raise
                finally:
                    onnx_log.setLevel(level)
        out.append({"name": name, "source": path, "format": fmt})
    return out


# ------------------------------------------------------------------------------------------------ one xc run
def _xc_command() -> list[str]:
    """The `xc` console script of this interpreter's environment, else the module."""
    script = os.path.join(os.path.dirname(sys.executable), "xc")
    return [script] if os.path.isfile(script) else [sys.executable, "-m", "xc_core"]


def _env(xc_home: str) -> dict:
    env = {**os.environ, "XC_HOME": xc_home}
    env.pop("RAY_ADDRESS", None)           # a batch's Ray is always one started for it here, never a cluster's
    return env


def _run(cmd: list[str], env: dict, timeout: float) -> dict:
    """One process, timed from its start to its exit; in its own session so a timeout stops its workers too."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        stderr += f"\n(bench: killed after {timeout:.0f} s)"
    return {"wall": time.perf_counter() - t0, "rc": p.returncode, "stdout": stdout, "stderr": stderr,
            "pid": p.pid}


def run_single(model: dict, targets: list[str], scratch: str) -> dict:
    """`xc analyze` of one model in a fresh $XC_HOME: its wall time and each target's status."""
    home = tempfile.mkdtemp(prefix="home-", dir=scratch)
    try:
        out_dir = os.path.join(home, "out")
        r = _run(_xc_command() + ["analyze", model["source"], "--targets", ",".join(targets), "--out", out_dir,
                                  "--quiet", "--no-store"], _env(home), SINGLE_TIMEOUT_S)
        statuses, errors = {}, {}
        try:
            with open(os.path.join(out_dir, "report.json")) as f:
                report = json.load(f)
            for tid, t in report.get("targets", {}).items():
                statuses[tid] = t.get("status")
                if t.get("status") != "ok":
                    errors[tid] = _first_line(t.get("error"))
        except (OSError, ValueError):
            pass                                    # no report: the run's rc and stderr say why
        return {"wall": r["wall"], "rc": r["rc"], "statuses": statuses, "errors": errors,
                "stderr": r["stderr"].strip()}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_batch(manifest: str, backend: str, targets: list[str], scratch: str, no_store: bool) -> dict:
    """`xc batch` of the manifest in a fresh $XC_HOME: its wall time and what matrix.json says."""
    home = tempfile.mkdtemp(prefix="home-", dir=scratch)
    try:
        out_dir = os.path.join(home, "out")
        cmd = _xc_command() + ["batch", manifest, "--targets", ",".join(targets), "--out", out_dir,
                               "--backend", backend, "--quiet"] + (["--no-store"] if no_store else [])
        r = _run(cmd, _env(home), BATCH_TIMEOUT_S)
        out = {"wall": r["wall"], "rc": r["rc"], "stderr": r["stderr"].strip(), "matrix": None}
        try:
            with open(os.path.join(out_dir, "matrix.json")) as f:
                matrix = json.load(f)
        except (OSError, ValueError) as e:
            out["matrix_error"] = str(e)
            return out
        from xc_core.fleet.matrix import counts
        out["matrix"] = {
            "complete": matrix.get("complete"), "models": len(matrix["models"]), "cells": len(matrix["cells"]),
            "counts": counts(matrix),
            "statuses": {f"{c['model']} × {c['target']}": c["status"] for c in matrix["cells"]},
            "errors": {f"{c['model']} × {c['target']}": _first_line(c.get("error")) for c in matrix["cells"]
                       if c["status"] != "ok"},
            "model_errors": {row["name"]: _first_line(row.get("error")) for row in matrix["models"]
                             if row.get("status") != "ok"},
            # Each model's own analysis seconds inside the batch (its row's `seconds`: the analysis alone, not the
            # process start a single run also pays), summed.
            "model_seconds": sum(row.get("seconds") or 0.0 for row in matrix["models"]),
        }
        if backend == "ray":
            out["ray_session"], out["ray_log_lines"] = _ray_log_findings(r["pid"])
        return out
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_added_target(manifest: str, targets: list[str], added: str, scratch: str) -> dict:
    """A fleet that gains a target: the batch that adds it to stored runs against the same batch from nothing."""
    walls = {}
    for kind in ("added", "fresh"):
        home = tempfile.mkdtemp(prefix="home-", dir=scratch)
        try:
            if kind == "added":
                first = _run(_xc_command() + ["batch", manifest, "--targets", ",".join(targets), "--out",
                                              os.path.join(home, "before"), "--quiet"], _env(home), BATCH_TIMEOUT_S)
                if first["rc"] != 0:
                    raise SystemExit(f"xc batch failed (rc {first['rc']}):\n{first['stderr'][-3000:]}")
            out_dir = os.path.join(home, "out")
            r = _run(_xc_command() + ["batch", manifest, "--targets", ",".join(targets + [added]), "--out", out_dir,
                                      "--quiet"], _env(home), BATCH_TIMEOUT_S)
            if r["rc"] != 0:
                raise SystemExit(f"xc batch failed (rc {r['rc']}):\n{r['stderr'][-3000:]}")
            with open(os.path.join(out_dir, "matrix.json")) as f:
                cells = json.load(f)["cells"]
            walls[kind] = r["wall"]
            walls[f"{kind}_cached"] = sum(1 for c in cells if c["cached"])
            walls[f"{kind}_cells"] = len(cells)
        finally:
            shutil.rmtree(home, ignore_errors=True)
    return walls


def _ray_log_findings(driver_pid: int) -> tuple[str | None, list[str]]:
    """xc starts its Ray with log_to_driver=False, so workers' warnings and errors stay in the session's log
    folder, named by the driver's pid: (that folder, its distinct warning / error / traceback lines with counts)."""
    try:
        from ray._common.utils import get_default_ray_temp_dir     # RAY_TMPDIR, else TMPDIR, else /tmp; + /ray
        root = get_default_ray_temp_dir()
    except ImportError:
        root = os.path.join(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp", "ray")
    sessions = glob.glob(os.path.join(root, f"session_*_{driver_pid}"))
    found: dict[str, int] = {}
    for session in sessions:
        for path in sorted(glob.glob(os.path.join(session, "logs", "*"))):
            if not os.path.isfile(path) or not path.endswith((".err", ".out", ".log")):
                continue
            try:
                with open(path, errors="replace") as f:
                    for line in f:
                        if _LOG_LEVEL.search(line):
                            # One entry per message and kind of log: a worker's file name carries its id.
                            name = re.sub(r"-[0-9a-f]{16,}_\d+\.", "-*.", os.path.basename(path))
                            key = f"{name}: {_strip_log_prefix(line)}"[:220]
                            found[key] = found.get(key, 0) + 1
            except OSError:
                continue
    return (sessions[0] if sessions else None), [f"{k}  (×{n})" if n > 1 else k for k, n in found.items()]


# A warning or an error in a log line: a Python logging level word on its own (not ERROR_INFO_CHANNEL, a channel's
# name), a Python warning, a traceback, or Ray's C++ format `[date time W|E|F pid tid] file.cc:N: message`.
_LOG_LEVEL = re.compile(r"\b(WARNING|ERROR|CRITICAL|FATAL)\b|\w+Warning:|Traceback|^\[[\d: ,.-]+ [WEF] \d+ \d+\]")
# What differs between repeats of one message: the date and time, and the C++ format's pid and thread id.
_PY_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+\s*")
_CPP_PREFIX = re.compile(r"^\[[\d: ,.-]+ ([A-Z]) \d+ \d+\]\s*")


def _strip_log_prefix(line: str) -> str:
    """A log line without its timestamp (and pid), so repeats of one message count as one."""
    line = line.strip()
    return _CPP_PREFIX.sub(r"\1 ", _PY_PREFIX.sub("", line))


def _first_line(text, limit: int = 160) -> str | None:
    if not text:
        return None
    return str(text).strip().splitlines()[0][:limit]


# ------------------------------------------------------------------------------------------------ Ray's own cost
def ray_overhead(cores: int, tasks: int) -> dict:
    """Child mode: Ray's start and per-task round trips in this one process (seconds)."""
    t0 = time.perf_counter()
    import ray
    t_import = time.perf_counter() - t0

    @ray.remote
    def noop():
        return None

    @ray.remote
    def one_mib():
        return bytes(1 << 20)

    t0 = time.perf_counter()
    # address="local": always a new instance for this process, never an existing cluster on the machine.
    ray.init(address="local", num_cpus=cores, include_dashboard=False, log_to_driver=False)
    t_init = time.perf_counter() - t0

    def round_trips(fn, n):
        times = []
        for _ in range(n):
            t = time.perf_counter()
            ray.get(fn.remote())
            times.append(time.perf_counter() - t)
        return times

    try:
        first = round_trips(noop, 1)[0]          # includes starting (or waking) a worker process
        noop_times = round_trips(noop, tasks)
        first_mib = round_trips(one_mib, 1)[0]   # the first object through the object store
        mib_times = round_trips(one_mib, tasks)
    finally:
        t0 = time.perf_counter()
        ray.shutdown()
        t_shutdown = time.perf_counter() - t0
    return {"import": t_import, "init": t_init, "shutdown": t_shutdown, "first_task": first,
            "noop_median": statistics.median(noop_times), "noop_p90": _p90(noop_times),
            "first_1mib": first_mib, "mib_median": statistics.median(mib_times), "mib_p90": _p90(mib_times)}


def _p90(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(0.9 * len(values)))]


def spawn_ray_overhead(cores: int, tasks: int, scratch: str) -> dict:
    r = _run([sys.executable, os.path.abspath(__file__), "--_ray-overhead", str(cores), "--ray-tasks", str(tasks)],
             _env(tempfile.mkdtemp(prefix="home-", dir=scratch)), SINGLE_TIMEOUT_S)
    line = next((x for x in r["stdout"].splitlines() if x.startswith("XC-FLEET-RAY ")), None)
    if line is None:
        raise SystemExit(f"the Ray overhead run failed (rc {r['rc']}):\n{r['stderr'][-3000:]}")
    out = json.loads(line.split(" ", 1)[1])
    out["stderr"] = r["stderr"].strip()
    return out


# ------------------------------------------------------------------------------------------------ driver
def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=int, default=20, help="models in the manifest (default 20)")
    ap.add_argument("--targets", default=DEFAULT_TARGETS, help=f"comma-separated (default {DEFAULT_TARGETS})")
    ap.add_argument("--repeat", type=int, default=1, help="measured rounds; figures are medians (default 1)")
    ap.add_argument("--skip-single", action="store_true", help="no single runs (and so no ratios)")
    ap.add_argument("--skip-ray", action="store_true", help="no Ray batch and no Ray overhead measurement")
    ap.add_argument("--no-store", action="store_true", help="run the batches with --no-store too")
    ap.add_argument("--ray-tasks", type=int, default=50, help="round trips per kind of Ray task (default 50)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    ap.add_argument("--added-target", metavar="T", help="also time a batch that adds target T to stored runs "
                                                        "against the same batch from nothing")
    ap.add_argument("--_ray-overhead", dest="ray_overhead", type=int, metavar="CORES", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ray_overhead:
        print("XC-FLEET-RAY " + json.dumps(ray_overhead(args.ray_overhead, args.ray_tasks)), flush=True)
        return 0
    if args.models < 1 or args.repeat < 1 or args.ray_tasks < 1:
        raise SystemExit("--models, --repeat and --ray-tasks must be at least 1")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    cores = len(os.sched_getaffinity(0))
    load_start = os.getloadavg()[0]
    kinds = ([] if args.skip_single else ["single"]) + ["local"] + ([] if args.skip_ray else ["ray"])

    with tempfile.TemporaryDirectory(prefix="xc-fleet-bench-") as scratch:
        model_dir = os.path.join(scratch, "models")
        os.makedirs(model_dir)
        t0 = time.perf_counter()
        models = build_models(model_dir, args.models)
        build_s = time.perf_counter() - t0
        manifest = os.path.join(model_dir, "manifest.txt")
        with open(manifest, "w") as f:          # paths relative to the manifest's folder, as users write them
            f.write("# bench/fleet.py: built models and bundled samples\n")
            f.writelines((m["source"] if m["format"] == "sample" else os.path.basename(m["source"])) + "\n"
                         for m in models)
        formats = {k: sum(1 for m in models if m["format"] == k) for k in ("pt2", "onnx", "sample")}
        print(f"built {len(models)} models in {build_s:.1f} s ({formats['pt2']} .pt2, {formats['onnx']} .onnx, "
              f"{formats['sample']} samples); targets {', '.join(targets)}; {cores} cores", flush=True)

        # Not measured: the first xc process after a while reads torch, ORT and OpenVINO from disk.
        warm = run_single(models[0], targets, scratch)
        if warm["rc"] != 0:
            raise SystemExit(f"xc analyze {models[0]['source']} failed (rc {warm['rc']}):\n{warm['stderr'][-3000:]}")

        ray_runs = []
        if not args.skip_ray:
            ray_runs.append(spawn_ray_overhead(cores, args.ray_tasks, scratch))
            print(f"ray overhead: init {ray_runs[-1]['init']:.2f} s, no-op {1e3 * ray_runs[-1]['noop_median']:.2f} ms",
                  flush=True)

        singles: list[dict[str, dict]] = []     # per repeat: model name → its single run
        batches: dict[str, list[dict]] = {"local": [], "ray": []}
        for rep in range(args.repeat):
            # Alternate the order each repeat so no kind always runs first (right after the previous one's
            # cleanup) or last (as the machine's other load changes).
            for kind in (kinds if rep % 2 == 0 else kinds[::-1]):
                if kind == "single":
                    runs = {}
                    for m in models:
                        runs[m["name"]] = run_single(m, targets, scratch)
                    singles.append(runs)
                    total = sum(r["wall"] for r in runs.values())
                    print(f"[{rep + 1}/{args.repeat}] single runs: {total:.1f} s in all", flush=True)
                else:
                    b = run_batch(manifest, kind, targets, scratch, args.no_store)
                    batches[kind].append(b)
                    print(f"[{rep + 1}/{args.repeat}] batch {kind}: {b['wall']:.1f} s (rc {b['rc']})", flush=True)
            if rep + 1 < args.repeat and not args.skip_ray:
                ray_runs.append(spawn_ray_overhead(cores, args.ray_tasks, scratch))
        added = []
        for rep in range(args.repeat if args.added_target else 0):
            added.append(run_added_target(manifest, targets, args.added_target, scratch))
            print(f"[{rep + 1}/{args.repeat}] adding {args.added_target}: {added[-1]['added']:.1f} s; from nothing "
                  f"{added[-1]['fresh']:.1f} s", flush=True)
        load_end = os.getloadavg()[0]

    figures = _figures(models, targets, cores, singles, batches, ray_runs, args)
    if added:
        figures["added_target"] = {"target": args.added_target, "added": _median([a["added"] for a in added]),
                                   "fresh": _median([a["fresh"] for a in added]),
                                   "ratio": _median([a["added"] / a["fresh"] for a in added]),
                                   "cached_cells": added[-1]["added_cached"], "cells": added[-1]["added_cells"]}
    figures["load_average"] = {"start": load_start, "end": load_end}
    problems = _print_summary(figures, models, targets, singles, batches, ray_runs)
    if added:
        a = figures["added_target"]
        print(f"  adding {a['target']} to stored runs: {a['added']:.1f} s against {a['fresh']:.1f} s from nothing "
              f"({a['ratio']:.2f}×, median of per-repeat ratios); {a['cached_cells']} of {a['cells']} cells cached")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
            f.write("\n")
        print(f"wrote {args.json}")
    return 1 if problems else 0


def _figures(models, targets, cores, singles, batches, ray_runs, args) -> dict:
    """Every measured figure (seconds), medians over the repeats."""
    out: dict = {"models": len(models), "targets": targets, "cores": cores, "repeat": args.repeat,
                 "batch_store": not args.no_store, "goal_ratio": GOAL}
    sums = [sum(r["wall"] for r in runs.values()) for runs in singles]
    if singles:
        out["single"] = {
            "sum": _median(sums), "sums": sums, "ideal": _median(sums) / cores,
            "per_model": {m["name"]: _median([runs[m["name"]]["wall"] for runs in singles]) for m in models},
            "failed_runs": sum(1 for runs in singles for r in runs.values() if r["rc"] != 0),
        }
    for kind, runs in batches.items():
        if not runs:
            continue
        walls = [b["wall"] for b in runs]
        fig = {"wall": _median(walls), "walls": walls, "rc": [b["rc"] for b in runs],
               "model_seconds": _median([(b["matrix"] or {}).get("model_seconds") for b in runs])}
        # How well the batch packs its own models' analyses onto the cores: wall / (their seconds / cores).
        packing = [b["wall"] / (b["matrix"]["model_seconds"] / cores) for b in runs
                   if b["matrix"] and b["matrix"]["model_seconds"]]
        fig["packing"] = _median(packing)
        if singles:
            # The ratio of each batch to the single runs of the same repeat, then the median of those ratios.
            ratios = [b["wall"] / (s / cores) for b, s in zip(runs, sums)]
            fig["ratios"] = ratios
            fig["ratio"] = _median(ratios)
            fig["meets_goal"] = fig["ratio"] <= GOAL
        last = runs[-1]["matrix"]
        if last:
            fig["matrix"] = {k: last[k] for k in ("complete", "models", "cells", "counts")}
            fig["matrix"]["expected_cells"] = len(models) * len(targets)
        out[f"batch_{kind}"] = fig
    if ray_runs:
        keys = ("import", "init", "shutdown", "first_task", "noop_median", "noop_p90", "first_1mib", "mib_median",
                "mib_p90")
        out["ray_overhead"] = {k: _median([r[k] for r in ray_runs]) for k in keys}
        out["ray_overhead"]["tasks"] = args.ray_tasks
    return out


def _print_summary(fig, models, targets, singles, batches, ray_runs) -> list[str]:
    """The summary table; returns the problems found (failed runs, wrong cell counts)."""
    problems: list[str] = []
    cores = fig["cores"]
    print()
    print(f"fleet: {fig['models']} models × {len(targets)} targets ({', '.join(targets)}) · {cores} cores · "
          f"{fig['repeat']} repeat(s), medians · fresh XC_HOME per run · batches "
          f"{'with' if fig['batch_store'] else 'without'} the run store · load average "
          f"{fig['load_average']['start']:.1f} → {fig['load_average']['end']:.1f}")
    print(f"  {'run':22} {'wall':>9} {'ideal':>9} {'ratio':>7}  {'goal':6} cells")
    if "single" in fig:
        s = fig["single"]
        print(f"  {'single runs (sum)':22} {s['sum']:8.1f}s {s['ideal']:8.1f}s {'':>7}  {'':6} "
              f"sum / {cores} cores = ideal; {s['failed_runs']} failed run(s)")
        if s["failed_runs"]:
            problems.append(f"{s['failed_runs']} single run(s) failed")
    for kind in ("local", "ray"):
        b = fig.get(f"batch_{kind}")
        if not b:
            continue
        ratio = f"{b['ratio']:6.2f}×" if "ratio" in b else f"{'—':>7}"
        goal = ("met" if b["meets_goal"] else "MISSED") if "ratio" in b else ""
        ideal = f"{fig['single']['ideal']:8.1f}s" if "single" in fig else f"{'—':>9}"
        m = b.get("matrix")
        last = batches[kind][-1]
        last_error = last.get("matrix_error") or (last["stderr"].splitlines() or ["no stderr"])[-1][:300]
        if m:
            by_status = ", ".join(f"{k} {v}" for k, v in m["counts"].items() if k not in ("cells",))
            cells = f"{m['cells']}/{m['expected_cells']} ({by_status}); complete {m['complete']}"
            if m["cells"] != m["expected_cells"] or m["models"] != fig["models"]:
                problems.append(f"batch {kind}: {m['models']} models, {m['cells']} cells; expected "
                                f"{fig['models']} and {m['expected_cells']}")
        else:
            cells = "no matrix.json"
            problems.append(f"batch {kind}: no matrix.json ({last_error})")
        if any(rc != 0 for rc in b["rc"]):
            problems.append(f"batch {kind}: exit codes {b['rc']}")
        print(f"  {'batch ' + kind:22} {b['wall']:8.1f}s {ideal} {ratio}  {goal:6} {cells}")
    if fig.get("repeat", 1) > 1:
        for kind in ("local", "ray"):
            b = fig.get(f"batch_{kind}")
            if b and "ratios" in b:
                print(f"    {kind} per repeat: walls {', '.join(f'{w:.1f}' for w in b['walls'])} s; ratios "
                      f"{', '.join(f'{r:.2f}' for r in b['ratios'])}")
    for kind in ("local", "ray"):
        b = fig.get(f"batch_{kind}")
        if b and b.get("model_seconds") and "single" in fig:
            # A batch row's seconds are its analysis alone; a single run's wall also has its process's start
            # (imports, the worker pool), which the batch pays once. The batch's wall against its own models'
            # seconds / cores is how well it packs them onto the cores, whatever each one costs.
            print(f"  batch {kind}: models' own analysis seconds summed {b['model_seconds']:.1f} s = "
                  f"{b['model_seconds'] / fig['single']['sum']:.2f}× the single runs' walls (each of which also "
                  f"starts a process); packing: wall / (that sum / {cores} cores) = {b['packing']:.2f}×")
    if "ray_overhead" in fig:
        r = fig["ray_overhead"]
        print(f"  ray: import {r['import']:.2f} s · ray.init {r['init']:.2f} s · shutdown {r['shutdown']:.2f} s · "
              f"first task {1e3 * r['first_task']:.0f} ms · no-op task median {1e3 * r['noop_median']:.2f} ms "
              f"(p90 {1e3 * r['noop_p90']:.2f}) · 1 MiB task median {1e3 * r['mib_median']:.2f} ms "
              f"(p90 {1e3 * r['mib_p90']:.2f}; first {1e3 * r['first_1mib']:.1f}) · {r['tasks']} tasks each")
    if "single" in fig:
        print("  single runs per model (median s):")
        per = fig["single"]["per_model"]
        fmt = {m["name"]: m["format"] for m in models}
        items = [f"{name} ({fmt[name]}) {t:.1f}" for name, t in per.items()]
        for i in range(0, len(items), 4):
            print("    " + " · ".join(items[i:i + 4]))

    # Anything odd: target errors, single runs and batches that disagree on a cell, messages on stderr.
    if singles:
        last = singles[-1]
        errs = {f"{name} × {tid}": e for name, r in last.items() for tid, e in r["errors"].items()}
        if errs:
            print(f"  single runs, targets not ok ({len(errs)}):")
            for k, e in errs.items():
                print(f"    {k}: {last[k.split(' × ')[0]]['statuses'].get(k.split(' × ')[1])}: {e}")
        for name, r in last.items():
            if r["rc"] != 0:
                print(f"    {name}: exit code {r['rc']}: {_first_line(r['stderr'], 300)}")
    for kind, runs in batches.items():
        if not runs or not runs[-1]["matrix"]:
            continue
        m = runs[-1]["matrix"]
        if m["errors"]:
            print(f"  batch {kind}, cells not ok ({len(m['errors'])}):")
            for k, e in m["errors"].items():
                print(f"    {k}: {m['statuses'][k]}: {e}")
        for name, e in m["model_errors"].items():
            print(f"  batch {kind}: model {name} not analysed: {e}")
        if singles:
            single_status = {f"{name} × {tid}": st for name, r in singles[-1].items()
                             for tid, st in r["statuses"].items()}
            differ = {k: (single_status.get(k), st) for k, st in m["statuses"].items() if single_status.get(k) != st}
            if differ:
                print(f"  batch {kind} vs single runs, cells whose status differs ({len(differ)}):")
                for k, (a, b) in differ.items():
                    print(f"    {k}: single {a}, batch {b}")
    stderr_lines = {}
    for label, texts in (("single", [r["stderr"] for runs in singles for r in runs.values()]),
                         ("batch local", [b["stderr"] for b in batches["local"]]),
                         ("batch ray", [b["stderr"] for b in batches["ray"]]),
                         ("ray overhead", [r["stderr"] for r in ray_runs])):
        for text in texts:
            for line in text.splitlines():
                if line.strip():
                    key = (label, _strip_log_prefix(line)[:220])
                    stderr_lines[key] = stderr_lines.get(key, 0) + 1
    if stderr_lines:
        print(f"  stderr of the runs ({len(stderr_lines)} distinct lines; the first 15):")
        for (label, line), n in list(stderr_lines.items())[:15]:
            print(f"    [{label}] {line}" + (f"  (×{n})" if n > 1 else ""))
    for b in batches["ray"][-1:]:
        if b.get("ray_log_lines"):
            lines = b["ray_log_lines"]
            print(f"  Ray's session logs of the last ray batch ({b['ray_session']}), warnings and errors "
                  f"({len(lines)} distinct; the first 15):")
            for line in lines[:15]:
                print(f"    {line}")
    for p in problems:
        print(f"  PROBLEM: {p}")
    return problems


if __name__ == "__main__":
    sys.exit(main())
