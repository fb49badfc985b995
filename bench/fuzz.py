"""Hostile input, at scale: hundreds of bad files through the whole analysis, as a user (or an attacker) would
bring them. Every input must end as a one-line refusal or an analysis — never a crash of xc, a hang, or code
from the file running (a canary file every payload would create).

    python bench/fuzz.py [--per-family N] [--seed 0] [--targets ort-cpu,openvino-cpu] [--timeout 15]

Families: random bytes under every accepted extension; truncated and bit-flipped ONNX; absurd, negative, zero
and symbolic-only dims; cyclic graphs; missing initializers; unknown ops and domains; external data outside the
model's folder; zips with traversal entries, absolute paths, symlinks and high compression ratios; pickle payloads
in .pt (data.pkl) and every .pt2 container; pickled modules; wrong state_dicts; .npz inputs with object arrays,
wrong dtypes, wrong shapes, NaN/Inf; edited .pt2 program JSON; models that crash, hang or exhaust a runtime;
hostile names (tests/hostile_names.py) in random roles of ONNX and .pt2 models, through the ONNX → PyTorch route
too; crafted report.json imports, through `report` and `diff` as History and a CI job read them; and, through the
CLI (bench/fuzz_cli.py), batch shard folders with symlinks to /proc/self/environ and outside folders (`batch
merge`), manifests that bomb memory or name special files (`batch`), crafted matrices (`diff`, `--gate`, `merge`),
event files and hostile GitHub API answers (`comment`), and names carrying terminal escapes (`analyze --md
--html`). The workers' Landlock sandbox is turned off while fuzzing: it would stop a payload that ran from creating
the canary, and so hide it. Run as a script, it starts itself again with a GITHUB_TOKEN in its environment, as a CI
job would have.

Columns: refused (one line), analysed, contained (the analysis finished but a target was killed: a crash, a
hang or memory past the worker's limit, named in the report), crash (anything else raised: an xc bug), hang
(the analysis itself did not return in time), code executed (the canary exists), long message (a refusal
of more than one line); for the CLI families also traceback, internal error, secret leaked (the token, a line of
the process's environment or an outside canary in any output, or a symlink written) and raw escape (ESC, BEL or a
right-to-left override raw on the terminal or in Markdown/HTML). Every column from crash on must be 0.
`--per-family 2` is the fast subset the tests run.
"""
from __future__ import annotations

import argparse
import collections
import io
import json
import os
import random
import shutil
import stat
import sys
import tempfile
import threading
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "bench")]

import fuzz_cli  # noqa: E402 — needs the paths above

EXTENSIONS = [".pt2", ".pt", ".pth", ".onnx", ".mlmodel", ".zip", ".safetensors", ".jit", ".ptl", ".bin"]
DEFAULT_PER_FAMILY = 40


# ---------------------------------------------------------------------------------------------- building ----
def _onnx(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    from onnx import helper
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] +
                          [helper.make_opsetid(d, 1) for d in domains])
    m.ir_version = 9
    return m


def _vi(name, shape, dtype=None):
    from onnx import TensorProto, helper
    return helper.make_tensor_value_info(name, dtype or TensorProto.FLOAT, shape)


def _save(model, path) -> str:
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def _relu(path, shape=(1, 8)) -> str:
    from onnx import helper
    return _save(_onnx([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x", list(shape))],
                       [_vi("y", list(shape))]), path)


def _seed_onnx(tmp) -> bytes:
    import torch
    from tiny_models import conv_bn_relu
    model, args = conv_bn_relu()
    path = os.path.join(tmp, "seed.onnx")
    torch.onnx.export(model, args, path, dynamo=True, optimize=False)
    return open(path, "rb").read()


def _zip(path, entries: list[tuple], compression=zipfile.ZIP_DEFLATED) -> str:
    """entries: (name, data) or (name, data, external_attr)."""
    with zipfile.ZipFile(path, "w", compression) as z:
        for e in entries:
            info = zipfile.ZipInfo(e[0])
            info.compress_type = compression
            if len(e) > 2:
                info.external_attr = e[2]
            z.writestr(info, e[1])
    return path


# --------------------------------------------------------------------------------------------- families ----
def family_random_bytes(ctx, n):
    for i in range(n):
        ext = EXTENSIONS[i % len(EXTENSIONS)]
        head = ctx.rng.choice([b"", b"PK\x03\x04", b"\x08\x07\x12", b"\x80\x02", b"PK\x05\x06" + b"\0" * 18])
        yield f"random{ext}", head + ctx.rng.randbytes(ctx.rng.randint(1, 4096)), {}


def family_onnx_truncated(ctx, n):
    for i in range(n):
        yield "truncated.onnx", ctx.onnx_seed[: ctx.rng.randrange(1, len(ctx.onnx_seed))], {}


def family_onnx_bitflip(ctx, n):
    for i in range(n):
        b = bytearray(ctx.onnx_seed)
        for _ in range(ctx.rng.randint(1, 12)):
            b[ctx.rng.randrange(len(b))] = ctx.rng.randrange(256)
        yield "flipped.onnx", bytes(b), {}


def family_dims(ctx, n):
    from onnx import helper
    dims = [[10 ** 9, 8], [2 ** 40], [-5, 8], [0, 8], ["a", "b"], ["n", 10 ** 12], [None, None], [1, -1],
            ["batch", "seq", "hidden", "x", "y", "z"], [2 ** 31, 2 ** 31]]
    for i in range(n):
        shape = dims[i % len(dims)]
        m = _onnx([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x", shape)], [_vi("y", shape)])
        yield "dims.onnx", m.SerializeToString(), {}


def family_cyclic(ctx, n):
    from onnx import helper
    for i in range(n):
        k = 2 + i % 4
        nodes = [helper.make_node("Add", ["x", f"t{(j + 1) % k}"], [f"t{j}"], name=f"add{j}") for j in range(k)]
        m = _onnx(nodes, [_vi("x", [1, 4])], [_vi("t0", [1, 4])])
        yield "cyclic.onnx", m.SerializeToString(), {}


def family_missing_initializer(ctx, n):
    from onnx import helper
    for i in range(n):
        node = helper.make_node(["MatMul", "Add", "Conv", "Gemm"][i % 4], ["x", f"w{i}"], ["y"], name="n")
        m = _onnx([node], [_vi("x", [1, 4])], [_vi("y", [1, 4])])
        yield "missing.onnx", m.SerializeToString(), {}


def family_unknown_ops(ctx, n):
    from onnx import helper
    for i in range(n):
        domain = ["", "com.evil", "com.microsoft", "ai.onnx.ml", "org.pytorch.aten"][i % 5]
        op = ["Foo", "Bar", "FusedEverything", "Relu", "ATen"][i % 5]
        m = _onnx([helper.make_node(op, ["x"], ["y"], name="n", domain=domain)], [_vi("x", [1, 4])],
                  [_vi("y", [1, 4])], domains=[domain] if domain else [], opset=[17, 20, 7, 1, 25][i % 5])
        yield "unknown.onnx", m.SerializeToString(), {}


def family_external_data(ctx, n):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    locations = ["../../../../etc/passwd", "/etc/passwd", "sub/../../outside.bin", "..", "/dev/zero",
                 "/proc/self/environ", "does-not-exist.bin", "weights.bin\0../x"]
    for i in range(n):
        w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
        w.ClearField("raw_data")
        w.data_location = TensorProto.EXTERNAL
        for k, v in (("location", locations[i % len(locations)]), ("offset", "0"), ("length", "64")):
            w.external_data.add(key=k, value=v)
        m = _onnx([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [_vi("x", [1, 4])],
                  [_vi("y", [1, 4])], [w])
        yield "external.onnx", m.SerializeToString(), {}


def family_zips(ctx, n):
    kinds = ["traversal", "absolute", "symlink", "bomb", "many-dots", "backslash"]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        ext = [".pt2", ".pt", ".zip", ".zip"][i % 4]
        path = os.path.join(ctx.tmp, f"z{i}{ext}")
        if kind == "traversal":
            _zip(path, [("../../escaped.txt", b"x"), ("m/version", b"1")])
        elif kind == "absolute":
            _zip(path, [("/tmp/escaped-abs.txt", b"x"), ("m/data.pkl", b"\x80\x02}q\x00.")])
        elif kind == "symlink":
            _zip(path, [("m.mlpackage/Manifest.json", "/etc/passwd", (stat.S_IFLNK | 0o777) << 16),
                        ("m.mlpackage/Data/x", b"{}")])
        elif kind == "bomb":
            _zip(path, [("m/data/0", b"\0" * (64 << 20)), ("m/data.pkl", b"\x80\x02}q\x00.")])
        elif kind == "many-dots":
            _zip(path, [("a/" + "../" * 40 + "x", b"x")])
        else:
            _zip(path, [("..\\..\\escaped.txt", b"x"), ("model.xml", b"<net/>")])
        yield os.path.basename(path), open(path, "rb").read(), {}


def family_pickle_payloads(ctx, n):
    import pickle
    from pt2_payloads import PAYLOAD_KINDS, _TouchOnUnpickle, craft
    for i in range(n):
        if i % 2 == 0:
            kind = PAYLOAD_KINDS[(i // 2) % len(PAYLOAD_KINDS)]
            path = craft(kind, os.path.join(ctx.tmp, f"p{i}.pt2"), ctx.canary)
            yield f"payload-{kind}.pt2", open(path, "rb").read(), {}
        else:
            # A torch.save-style zip whose data.pkl runs a payload; also under a TorchScript-looking layout.
            member = ["archive/data.pkl", "archive/constants.pkl", "archive/extra/data.pkl"][i % 3]
            path = _zip(os.path.join(ctx.tmp, f"p{i}.pt"),
                        [(member, pickle.dumps(_TouchOnUnpickle(ctx.canary), protocol=2)),
                         ("archive/version", b"3"), ("archive/byteorder", b"little")] +
                        ([("archive/code/__torch__.py", b"")] if member.endswith("constants.pkl") else []))
            yield "payload.pt", open(path, "rb").read(), {}


def family_pickled_modules(ctx, n):
    import pickle

    import torch
    from pt2_payloads import _TouchOnUnpickle
    from tiny_models import conv_bn_relu
    for i in range(n):
        buf = io.BytesIO()
        if i % 3 == 0:
            torch.save(conv_bn_relu()[0], buf)                       # a whole pickled nn.Module
        elif i % 3 == 1:
            torch.save({"model": conv_bn_relu()[0]}, buf, _use_new_zipfile_serialization=False)  # legacy pickle
        else:
            buf.write(pickle.dumps(_TouchOnUnpickle(ctx.canary)))   # a bare pickle named .pt
        yield ["module.pt", "legacy.pth", "bare.pt"][i % 3], buf.getvalue(), {}


def family_wrong_state_dicts(ctx, n):
    import torch
    from xc_core.sources.samples import SAMPLES
    names = list(SAMPLES)
    for i in range(n):
        good = SAMPLES[names[i % len(names)]].model().state_dict()
        kind = i % 5
        if kind == 0:
            sd = {}
        elif kind == 1:
            sd = {k + ".renamed": v for k, v in good.items()}
        elif kind == 2:
            sd = {k: v.reshape(-1)[:1].clone() for k, v in good.items()}
        elif kind == 3:
            sd = {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in good.items()}
            sd["extra"] = torch.zeros(3)
        else:
            sd = {"weights": [1, 2, 3], "name": "x"}
        buf = io.BytesIO()
        torch.save(sd, buf)
        yield "state_dict.pt", buf.getvalue(), {}


def family_npz_inputs(ctx, n):
    import numpy as np
    kinds = ["object", "int-for-float", "complex", "nan", "inf", "wrong-shape", "wrong-name", "huge-header",
             "bool", "scalar"]
    model = _relu(os.path.join(ctx.tmp, "npz-model.onnx"))
    for i in range(n):
        kind = kinds[i % len(kinds)]
        npz = os.path.join(ctx.tmp, f"in{i}.npz")
        if kind == "object":
            np.savez(npz, x=np.array([object(), 1], dtype=object))
        elif kind == "int-for-float":
            np.savez(npz, x=np.ones((1, 8), np.int64))
        elif kind == "complex":
            np.savez(npz, x=np.ones((1, 8), np.complex64))
        elif kind == "nan":
            np.savez(npz, x=np.full((1, 8), np.nan, np.float32))
        elif kind == "inf":
            np.savez(npz, x=np.full((1, 8), np.inf, np.float32))
        elif kind == "wrong-shape":
            np.savez(npz, x=np.ones((3, 3), np.float32))
        elif kind == "wrong-name":
            np.savez(npz, nope=np.ones((1, 8), np.float32))
        elif kind == "huge-header":
            buf = io.BytesIO()
            np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False,
                                                       "shape": (1 << 20, 1 << 20)})
            _zip(npz, [("x.npy", buf.getvalue())])
        elif kind == "bool":
            np.savez(npz, x=np.ones((1, 8), bool))
        else:
            np.savez(npz, x=np.float32(3))
        yield "npz-model.onnx", open(model, "rb").read(), {"inputs_npz": npz}


def family_pt2_json(ctx, n):
    from fuzz_sources import _mutate_json
    from pt2_payloads import good_archive
    seed = open(good_archive(os.path.join(ctx.tmp, "good.pt2")), "rb").read()
    for i in range(n):
        yield "edited.pt2", _mutate_json(seed, ctx.rng, ctx.canary), {}


def family_runtime_killers(ctx, n):
    """Valid models that crash, hang or exhaust a runtime: the analysis must finish with those targets named."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    for i in range(n):
        kind = i % 3
        if kind == 0:    # OpenVINO reads out of bounds
            idx = numpy_helper.from_array(np.array([[10 ** 9]], np.int64), "idx")
            m = _onnx([helper.make_node("Constant", [], ["i"], value=idx),
                       helper.make_node("GatherND", ["x", "i"], ["y"])], [_vi("x", [4])], [_vi("y", [1])],
                      opset=20)
        elif kind == 1:  # a 105-byte Expand to 30000 x 30000
            shape = numpy_helper.from_array(np.array([30000, 30000], np.int64), "s")
            m = _onnx([helper.make_node("Expand", ["x", "s"], ["y"], name="e")], [_vi("x", [1, 1])],
                      [_vi("y", [30000, 30000])], [shape])
        else:            # a Loop with a trip count of 1e15
            body = helper.make_graph([helper.make_node("Identity", ["c"], ["c2"]),
                                      helper.make_node("Add", ["a", "one"], ["a2"])], "body",
                                     [_vi("i", [], TensorProto.INT64), _vi("c", [], TensorProto.BOOL),
                                      _vi("a", [1])], [_vi("c2", [], TensorProto.BOOL), _vi("a2", [1])],
                                     [numpy_helper.from_array(np.ones(1, np.float32), "one")])
            m = _onnx([helper.make_node("Loop", ["trip", "cond", "x"], ["y"], body=body)], [_vi("x", [1])],
                      [_vi("y", [1])], [numpy_helper.from_array(np.array(10 ** 15, np.int64), "trip"),
                                        numpy_helper.from_array(np.array(True), "cond")])
        yield "killer.onnx", m.SerializeToString(), {}


def family_hostile_onnx_names(ctx, n):
    """Payload names (tests/hostile_names.py) in random roles of a small graph — node, input, output, initializer and
    intermediate names, a symbolic dim, torch.onnx's scope metadata — through the ONNX → PyTorch route too."""
    import numpy as np
    from onnx import helper, numpy_helper
    from hostile_names import payloads
    names = payloads(ctx.canary)

    def pick():
        a, b = ctx.rng.choice(names), ctx.rng.choice(names)
        return ctx.rng.choice([a, a + b, a[: ctx.rng.randint(1, len(a))], b + str(ctx.rng.randint(0, 9))])
    for i in range(n):
        # four distinct names (a suffix per role keeps them apart)
        x, w, h, y = (pick() + suffix for suffix in ("", "\u2060w", "\u2060h", "\u2060y"))
        dim = pick() if i % 3 == 0 else 2
        node_a = helper.make_node("Add", [x, w], [h], name=pick())
        node_a.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=ctx.rng.choice(
            [repr(["", pick(), "add"]), pick(), "[" * 300, "1", "['a', 2]"]))
        nodes = [node_a, helper.make_node(ctx.rng.choice(["Relu", "Sigmoid", "Neg"]), [h], [y], name=pick())]
        m = _onnx(nodes, [_vi(x, [dim, 8])], [_vi(y, [dim, 8])],
                  [numpy_helper.from_array(np.ones(8, np.float32), w)])
        m.graph.name = pick()
        yield "names.onnx", m.SerializeToString(), {"targets": ["ort-cpu", "coreml-cpu", "openvino-cpu"]}


def family_hostile_pt2_names(ctx, n):
    """nn.Module submodule and parameter names from the payloads, saved by torch.export: refused by the reader, or
    compiled by every PyTorch-side target without running anything."""
    import torch
    from hostile_names import hostile_module_names, hostile_torch_module
    every, plain = hostile_module_names(ctx.canary), hostile_module_names(ctx.canary, quotes=False)
    for i in range(n):
        pool = every if i % 2 else plain
        names = ctx.rng.sample(pool, ctx.rng.randint(1, min(4, len(pool))))
        model, args = hostile_torch_module(names)
        path = os.path.join(ctx.tmp, f"names{i}.pt2")
        try:
            torch.export.save(torch.export.export(model, args), path)
        except Exception:  # noqa: BLE001 — torch itself refused the names: nothing to upload
            continue
        yield "names.pt2", open(path, "rb").read(), {"targets": ["ort-cpu", "coreml-cpu"]}


def _seed_report(ctx) -> dict:
    """A real report.json of a tiny model (every default target), made once per fuzz run."""
    if getattr(ctx, "report_seed", None) is None:
        from xc_core.api import analyze
        path = _relu(os.path.join(ctx.tmp, "report-seed.onnx"))
        ctx.report_seed = analyze(path, ["ort-cpu", "ort-nnapi"], out_dir=os.path.join(ctx.tmp, "report-seed"))
    return ctx.report_seed


def family_report_imports(ctx, n):
    """Crafted report.json files, as History imports them and `report` / `diff` read them: values of the wrong type
    anywhere, keys removed, hostile names, nesting 200,000 deep, sidecar pointers to missing keys and indexes."""
    import copy
    from hostile_names import payloads
    from xc_core.report.sidecar import MARKER, SIDECAR_FILE
    seed = _seed_report(ctx)
    names = payloads(ctx.canary)
    odd = [None, -1, 10 ** 30, 1e308, "", [], {}, [[[]]], True, "x" * 10_000, {"a": [None]}]

    def paths(value, prefix=()):
        out = [prefix]
        if isinstance(value, dict):
            for k, v in value.items():
                out += paths(v, prefix + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value[:3]):
                out += paths(v, prefix + (i,))
        return out
    every = [p for p in paths(seed) if p]
    for i in range(n):
        kind = i % 5
        sidecar = None
        if kind == 0:        # nesting far beyond any report
            data = ('{"source":{},"targets":' + "[" * 200_000 + "]" * 200_000 + "}").encode()
        else:
            r = copy.deepcopy(seed)
            for _ in range(ctx.rng.randint(1, 6)):
                path = ctx.rng.choice(every)
                parent = r
                try:
                    for k in path[:-1]:
                        parent = parent[k]
                    if kind == 1:
                        parent[path[-1]] = ctx.rng.choice(odd)
                    elif kind == 2 and isinstance(parent, dict):
                        del parent[path[-1]]
                    else:
                        parent[path[-1]] = ctx.rng.choice(names) if not isinstance(parent[path[-1]], dict) \
                            else {ctx.rng.choice(names): parent[path[-1]]}
                except (KeyError, IndexError, TypeError):
                    continue
            if kind == 4:    # a sidecar whose pointers lead nowhere
                pointer = ctx.rng.choice(["/targets/nope/graph", "/targets/ort-cpu/graph/nodes/99", "",
                                          "/x/../../etc", 7])
                r["targets"]["ort-cpu"]["graph"] = {MARKER: pointer}
                r["detached"] = {"file": SIDECAR_FILE, "pointers": [pointer], "bytes": 10}
                sidecar = json.dumps({"format": 1, "values": {"/elsewhere": []}}).encode()
            data = json.dumps(r).encode()
        yield "report.json", data, {"report_sidecar": sidecar}


FAMILIES = {
    "random bytes": family_random_bytes, "onnx truncated": family_onnx_truncated,
    "onnx bit-flipped": family_onnx_bitflip, "dims": family_dims, "cyclic graph": family_cyclic,
    "missing initializer": family_missing_initializer, "unknown op/domain": family_unknown_ops,
    "external data": family_external_data, "zip tricks": family_zips, "pickle payloads": family_pickle_payloads,
    "pickled modules": family_pickled_modules, "wrong state_dict": family_wrong_state_dicts,
    "npz inputs": family_npz_inputs, "pt2 json edits": family_pt2_json, "runtime killers": family_runtime_killers,
    "hostile onnx names": family_hostile_onnx_names, "hostile pt2 names": family_hostile_pt2_names,
    "report imports": family_report_imports,
}
# The commands that read what CI hands them (shard folders, manifests, matrices, event files, API answers) and
# names that carry terminal escapes: bench/fuzz_cli.py.
FAMILIES.update(fuzz_cli.FAMILIES)
# Families whose every input is slow (a whole analysis, or a limit to wait out) get fewer inputs.
SCALE = {"runtime killers": 0.15, "npz inputs": 0.5, "dims": 0.75, "wrong state_dict": 0.5, "hostile pt2 names": 0.5,
         **fuzz_cli.SCALE}


class _Ctx:
    def __init__(self, tmp, seed):
        self.tmp, self.rng = tmp, random.Random(seed)
        self.canary = os.path.join(tmp, "CANARY")
        self.onnx_seed = _seed_onnx(tmp)


def run(per_family: int = DEFAULT_PER_FAMILY, seed: int = 0, targets=("ort-cpu", "openvino-cpu"),
        timeout_s: float = 15, memory_gib: float = 2.0, log=print) -> dict:
    """Every family through analyze(); returns {family: Counter} plus "_examples" of each failure kind."""
    from xc_core.api import analyze
    from xc_core.errors import XcInputError
    from xc_core.worker import WorkerLimits
    # Landlock in the workers would stop a payload that ran from creating the canary outside the run folder, and so
    # hide it: the fuzzer measures the guards that keep file content from running, with the sandbox off.
    sandbox = os.environ.get("XC_LANDLOCK")
    os.environ["XC_LANDLOCK"] = "0"
    tmp = tempfile.mkdtemp(prefix="fuzz-")
    ctx = _Ctx(tmp, seed)
    limits = WorkerLimits(timeout_s, memory_gib)
    table: dict = collections.defaultdict(collections.Counter)
    examples: dict = collections.defaultdict(list)
    hang_after = 6 * timeout_s + 60   # prepare + targets each bounded by the worker limit
    try:
        for family, make in FAMILIES.items():
            n = per_family if per_family <= 2 else max(2, int(per_family * SCALE.get(family, 1)))
            for name, data, extra in make(ctx, n):
                folder = tempfile.mkdtemp(dir=tmp)
                path = os.path.join(folder, name)
                with open(path, "wb") as f:
                    f.write(data)
                outcome = {}

                def go():
                    if "cli" in extra:
                        outcome.update(extra["cli"](folder))
                        return
                    if "report_sidecar" in extra:
                        outcome.update(_import_report(path, extra["report_sidecar"], ctx))
                        return
                    try:
                        kwargs = dict(extra)
                        chosen = kwargs.pop("targets", targets)
                        outcome["report"] = analyze(path, list(chosen), worker_limits=limits, jobs=2, **kwargs)
                    except XcInputError as e:
                        outcome["refused"] = str(e)
                    except Exception as e:  # noqa: BLE001 — exactly what this hunts
                        outcome["crash"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"

                t0 = time.monotonic()
                th = threading.Thread(target=go, daemon=True)
                th.start()
                th.join(hang_after)
                c = table[family]
                c["inputs"] += 1
                if th.is_alive():
                    c["hang"] += 1
                    examples["hang"].append(f"{family}/{name}")
                elif "crash" in outcome:
                    c["crash"] += 1
                    examples["crash"].append(f"{family}/{name}: {outcome['crash']}")
                elif "refused" in outcome:
                    c["refused"] += 1
                    if "\n" in outcome["refused"]:
                        c["long message"] += 1
                        examples["long message"].append(f"{family}/{name}: {outcome['refused'][:200]!r}")
                else:
                    report = outcome["report"]
                    blocks = list(report["targets"].values()) + [report.get("reference") or {}]
                    killed = [b for b in blocks if (b.get("error") or "").startswith(("killed", "exceeded"))]
                    c["contained" if killed else "analysed"] += 1
                for kind in CLI_COLUMNS:          # judged on everything a CLI case printed and wrote
                    if kind in outcome:
                        c[kind] += 1
                        examples[kind].append(f"{family}/{name}: {outcome[kind]}")
                if os.path.exists(ctx.canary):
                    c["code executed"] += 1
                    examples["code executed"].append(f"{family}/{name}")
                    os.remove(ctx.canary)
                shutil.rmtree(folder, ignore_errors=True)
                if log and time.monotonic() - t0 > 5:
                    log(f"  {family}/{name}: {time.monotonic() - t0:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if sandbox is None:
            os.environ.pop("XC_LANDLOCK", None)
        else:
            os.environ["XC_LANDLOCK"] = sandbox
    out = {k: dict(v) for k, v in table.items()}
    out["_examples"] = dict(examples)
    return out


def _import_report(path: str, sidecar: bytes | None, ctx) -> dict:
    """A report.json through the CLI's `report` (Markdown and HTML) and `diff` against a real one, as History and a
    CI job read them: exit 2 with one line is a refusal, 0 an analysis, anything else a crash."""
    import contextlib
    from xc_core.cli import main
    from xc_core.report.sidecar import SIDECAR_FILE
    if sidecar is not None:
        with open(os.path.join(os.path.dirname(path), SIDECAR_FILE), "wb") as f:
            f.write(sidecar)
    seed = os.path.join(ctx.tmp, "report-seed", "report.json")
    for argv in (["report", path, "--format", "md"], ["report", path, "--format", "html"], ["diff", seed, path]):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except BaseException as e:  # noqa: BLE001 — exactly what this hunts
                return {"crash": f"{argv[0]}: {type(e).__name__}: {e}"[:200]}
        text = err.getvalue().strip()
        if rc == 2:
            return {"refused": text}
        if rc not in (0, 1) or (rc == 1 and argv[0] != "diff") or "internal error" in text:
            return {"crash": f"{argv[0]} exit {rc}: {text[:160]}"}
    return {"report": {"targets": {}}}


CLI_COLUMNS = ("traceback", "internal error", "secret leaked", "raw escape")
COLUMNS = ["inputs", "refused", "analysed", "contained", "crash", "hang", "code executed", "long message",
           *CLI_COLUMNS]
BAD = ("crash", "hang", "code executed", "long message", *CLI_COLUMNS)


def print_table(result: dict) -> None:
    print(f"{'family':22}" + "".join(f"{c:>15}" for c in COLUMNS))
    total = collections.Counter()
    for family, c in result.items():
        if family.startswith("_"):
            continue
        total.update(c)
        print(f"{family:22}" + "".join(f"{c.get(k, 0):>15}" for k in COLUMNS))
    print(f"{'total':22}" + "".join(f"{total.get(k, 0):>15}" for k in COLUMNS))
    for kind, items in result.get("_examples", {}).items():
        for e in items[:10]:
            print(f"  {kind}: {e}")


def main() -> int:
    if os.environ.get("GITHUB_TOKEN") != fuzz_cli.FUZZ_TOKEN:
        # Started again with a token in its environment, as a CI job is: /proc/self/environ then holds it, and any
        # case that copies or prints the environment shows as "secret leaked".
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "GITHUB_TOKEN": fuzz_cli.FUZZ_TOKEN})
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-family", type=int, default=DEFAULT_PER_FAMILY)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--targets", default="ort-cpu,openvino-cpu")
    ap.add_argument("--timeout", type=float, default=15)
    ap.add_argument("--memory", type=float, default=2.0)
    args = ap.parse_args()
    t0 = time.monotonic()
    result = run(args.per_family, args.seed, args.targets.split(","), args.timeout, args.memory)
    print_table(result)
    print(f"{time.monotonic() - t0:.0f} s")
    bad = sum(c.get(k, 0) for f, c in result.items() if not f.startswith("_") for k in BAD)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
