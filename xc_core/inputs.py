"""Model inputs: seeded random values from the input specs, or the user's own .npz (read without pickle, each
array's header checked before its data is read), always within the input-size limit."""
from __future__ import annotations

import math
import os

import numpy as np

from .errors import XcInputError
from .limits import Limits, exceeded, human_bytes
from .sources.spec import InputSpec, ShapeOverrides

SEED = 0
# dtypes a model input can have (what ONNX / torch inputs use); names as in --shape NAME=DxD:dtype.
INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
_NPZ_KINDS = {"b": "bool", "i": "integer", "u": "unsigned integer", "f": "float"}


def random_inputs(specs: list[InputSpec], seed: int = SEED) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for s in specs:
        if s.dtype == "bool":
            out[s.name] = rng.integers(0, 2, s.shape).astype(bool)
        elif s.low is not None:
            out[s.name] = rng.integers(int(s.low), int(s.high), s.shape).astype(s.dtype)
        else:
            out[s.name] = rng.standard_normal(s.shape).astype(s.dtype)
    return out


def input_bytes(specs: list[InputSpec]) -> int:
    return sum(math.prod(s.shape) * _itemsize(s.dtype) for s in specs)


def check_input_size(specs: list[InputSpec], limits: Limits) -> None:
    """Refuse shapes whose inputs would not fit the limit, before anything is allocated."""
    total = input_bytes(specs)
    if total > limits.bytes("max_input_mb"):
        biggest = max(specs, key=lambda s: math.prod(s.shape) * _itemsize(s.dtype))
        what = (f"the inputs for the shapes that would run (largest: {biggest.name} "
                f"{'x'.join(map(str, biggest.shape))} {biggest.dtype}) need")
        raise exceeded("max_input_mb", what, total, limits)


def _itemsize(dtype: str) -> int:
    if dtype == "bfloat16":
        return 2
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return 8  # a dtype numpy does not name (float8, complex32, …): count it at the widest scalar


def read_npz(path: str, limits: Limits | None = None) -> dict[str, np.ndarray]:
    """Arrays by name. The zip is bounded, every array header is checked (plain numeric dtype, size within the
    input limit) before its data is read, and nothing is unpickled."""
    from .sources import check_file_size
    from .sources.safe_zip import _opened, open_zip
    limits = limits or Limits.from_env()
    name = os.path.basename(path)
    accepted = "accepted: numpy.savez with one plain numeric array per model input"
    if not os.path.isfile(path):
        raise XcInputError(f"{name}: no such file ({accepted})")
    if os.path.getsize(path) == 0:
        raise XcInputError(f"{name}: the .npz file is empty ({accepted})")
    check_file_size(path, limits)
    with open_zip(path, name, limits) as z:
        headers = []
        total = 0
        for info in z.infolist():
            if info.is_dir():
                continue
            if not info.filename.endswith(".npy"):
                raise XcInputError(f"{name}: holds '{info.filename[:80]}', which is not an array ({accepted})")
            with _opened(z, info, name) as f:
                shape, fortran, dtype = _npy_header(f, name, info.filename, accepted)
            nbytes = math.prod(shape) * dtype.itemsize
            if nbytes > info.file_size:
                raise XcInputError(f"{name}: the array '{info.filename[:-4]}' declares {human_bytes(nbytes)} but "
                                   f"stores {human_bytes(info.file_size)}; the file is damaged")
            total += nbytes
            if total > limits.bytes("max_input_mb"):
                raise exceeded("max_input_mb", f"{name}: the arrays hold", total, limits)
            headers.append(info)
        out = {}
        for info in headers:
            with _opened(z, info, name) as f:
                try:
                    out[info.filename[:-4]] = np.lib.format.read_array(f, allow_pickle=False)
                except Exception as e:  # noqa: BLE001 — truncated data, CRC errors, inflate failures
                    raise XcInputError(f"{name}: the array '{info.filename[:-4]}' cannot be read "
                                       f"({type(e).__name__}); the file is damaged") from None
    return out


def _npy_header(f, name: str, member: str, accepted: str):
    try:
        version = np.lib.format.read_magic(f)
        read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read is None:
            raise ValueError(f"format version {version}")
        shape, fortran, dtype = read(f)
    except Exception as e:  # noqa: BLE001 — anything that is not a .npy header
        raise XcInputError(f"{name}: '{member[:80]}' is not a readable .npy array ({type(e).__name__}); "
                           f"{accepted}") from None
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None or dtype.kind not in _NPZ_KINDS:
        kind = ("an object array" if dtype.hasobject else "a structured array" if dtype.fields is not None
                else f"an array of dtype {dtype}")
        raise XcInputError(f"{name}: '{member[:-4][:80]}' is {kind}; model inputs are bool, integer or float "
                           "arrays")
    return tuple(int(d) for d in shape), fortran, dtype


def npz_shapes(arrays: dict[str, np.ndarray]) -> ShapeOverrides:
    return {k: (list(v.shape), str(v.dtype)) for k, v in arrays.items()}


def check_npz(arrays: dict[str, np.ndarray], specs: list[InputSpec]) -> dict[str, np.ndarray]:
    names = [s.name for s in specs]
    missing = [n for n in names if n not in arrays]
    if missing:
        raise XcInputError(f"the .npz has no array for input(s) {missing}; it has {sorted(arrays)}, the model "
                           f"takes {names}")
    out = {}
    for s in specs:
        a = arrays[s.name]
        if list(a.shape) != list(s.shape) and s.note != "shape given by the user":
            raise XcInputError(f"input '{s.name}': the .npz array has shape {list(a.shape)}, the model takes "
                               f"{s.shape}")
        out[s.name] = a.astype(s.dtype, copy=False)
    return out


def parse_shape_flags(flags: list[str] | None) -> ShapeOverrides:
    """--shape NAME=1x3x224x224[:dtype] (repeatable)."""
    out: ShapeOverrides = {}
    for f in flags or []:
        try:
            name, rest = f.split("=", 1)
            dims, _, dtype = rest.partition(":")
            shape = [int(d) for d in dims.lower().split("x")]
            if not name or any(d <= 0 for d in shape):
                raise ValueError
        except ValueError:
            raise XcInputError(f"--shape '{f}': expected NAME=DxDx...[:dtype], e.g. image=1x3x224x224 or "
                               "tokens=1x32:int64") from None
        if dtype and dtype not in INPUT_DTYPES:
            raise XcInputError(f"--shape '{f}': unknown dtype '{dtype}'; accepted: {', '.join(INPUT_DTYPES)}")
        out[name] = (shape, dtype or None)
    return out
