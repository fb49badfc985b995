"""Mutation fuzzing of the source loaders: every mutated file must either load or be refused with one line
(XcInputError), never raise anything else, and never run a payload.

    python bench/fuzz_sources.py [--n 300] [--seed 0]

Mutations: byte flips and truncations of whole files (.pt2, .onnx, .npz, TorchScript .pt), and, for .pt2, random
edits of the program JSON (strings replaced by Python, numbers by extremes, keys dropped). Prints, per format and
mutation, how many loaded, how many were refused, and every other exception with its first line — the last
column must stay 0.
"""
from __future__ import annotations

import argparse
import collections
import io
import json
import os
import random
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

CANARY_CODE = "__import__('builtins').open({canary!r}, 'w')"


def _seeds(tmp: str) -> dict[str, str]:
    import numpy as np
    import torch
    from pt2_payloads import good_archive
    from tiny_models import conv_bn_relu
    out = {"pt2": good_archive(os.path.join(tmp, "seed.pt2"))}
    model, args = conv_bn_relu()
    onnx_path = os.path.join(tmp, "seed.onnx")
    torch.onnx.export(model, args, onnx_path, dynamo=True, optimize=False)
    out["onnx"] = onnx_path
    ts = os.path.join(tmp, "seed.pt")
    torch.jit.script(model).save(ts)
    out["torchscript"] = ts
    npz = os.path.join(tmp, "seed.npz")
    np.savez_compressed(npz, x=np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype("float32"))
    out["npz"] = npz
    return out


def _flip(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def _truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(1, len(data))]


def _mutate_json(data: bytes, rng: random.Random, canary: str) -> bytes:
    """Edit one value of models/model.json inside the archive."""
    src = zipfile.ZipFile(io.BytesIO(data))
    members = {i.filename: src.read(i) for i in src.infolist()}
    key = next(k for k in members if k.endswith("models/model.json"))
    doc = json.loads(members[key])
    paths = []

    def walk(o, path):
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, path + [k])
        elif isinstance(o, list):
            for i, v in enumerate(o):
                walk(v, path + [i])
        paths.append(path)

    walk(doc, [])
    path = rng.choice(paths[:-1])
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    choice = rng.random()
    if choice < 0.35:
        parent[path[-1]] = CANARY_CODE.format(canary=canary)
    elif choice < 0.6:
        parent[path[-1]] = rng.choice([10 ** 12, -1, 0, 2 ** 70, None, True, [], {}])
    elif isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent.pop(path[-1])
    members[key] = json.dumps(doc).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in members.items():
            z.writestr(k, v)
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300, help="mutations per format and kind")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from xc_core.errors import XcInputError
    from xc_core.inputs.values import check_input_size, read_npz
    from xc_core.limits import Limits
    from xc_core.sources import load_source

    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="xc-fuzz-")
    canary = os.path.join(tmp, "CANARY")
    seeds = _seeds(tmp)
    limits = Limits.from_env()
    table = collections.defaultdict(collections.Counter)
    crashes = collections.Counter()
    kinds = {"flip": _flip, "truncate": _truncate}
    for fmt, seed_path in seeds.items():
        data = open(seed_path, "rb").read()
        ext = os.path.splitext(seed_path)[1]
        fmt_kinds = dict(kinds, **({"json": lambda d, r: _mutate_json(d, r, canary)} if fmt == "pt2" else {}))
        for kind, mutate in fmt_kinds.items():
            for i in range(args.n):
                path = os.path.join(tmp, f"m{i}{ext}")
                with open(path, "wb") as f:
                    f.write(mutate(data, rng))
                try:
                    if fmt == "npz":
                        read_npz(path, limits)
                    else:
                        src = load_source(path, {"x": ([1, 3, 16, 16], None)} if fmt == "torchscript" else None,
                                          limits)
                        check_input_size(src.inputs, limits)
                        src.close()
                    table[(fmt, kind)]["loaded"] += 1
                except XcInputError as e:
                    assert "\n" not in str(e), str(e)
                    table[(fmt, kind)]["refused"] += 1
                except Exception as e:  # noqa: BLE001 — exactly what this script hunts
                    table[(fmt, kind)]["other exception"] += 1
                    first = (str(e).strip().splitlines() or [""])[0][:120]
                    crashes[f"{fmt}/{kind}: {type(e).__name__}: {first}"] += 1
    print(f"{'format':12} {'mutation':9} {'loaded':>7} {'refused':>8} {'other exception':>16}")
    for (fmt, kind), c in table.items():
        print(f"{fmt:12} {kind:9} {c['loaded']:7} {c['refused']:8} {c['other exception']:16}")
    for text, n in crashes.most_common():
        print(f"  {n:4} × {text}")
    ran = os.path.exists(canary)
    print("payload ran: " + ("YES" if ran else "no"))
    return 1 if crashes or ran else 0


if __name__ == "__main__":
    sys.exit(main())
