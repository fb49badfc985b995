"""Model inputs: seeded random values from the input specs, or the user's own .npz (read without pickle, each
array's header checked before its data is read), always within the input-size limit."""
from __future__ import annotations

import math
import os

import numpy as np

from ..errors import XcInputError
from ..limits import Limits, exceeded, human_bytes
from ..sources.spec import InputSpec, ShapeOverrides

SEED = 0
# dtypes a model input can have (what ONNX / torch inputs use); names as in --shape NAME=DxD:dtype.
INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
_NPZ_KINDS = {"b": "bool", "i": "integer", "u": "unsigned integer", "f": "float"}


def random_inputs(specs: list[InputSpec], seed: int = SEED) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for s in specs:
        # np.asarray: a 0-d draw comes back as a numpy scalar, which runtimes read as shape (1,), not ().
        if s.value is not None:
            out[s.name] = np.full(s.shape, s.value, dtype=_np_dtype(s.dtype))
        elif s.dtype == "bool":
            out[s.name] = np.asarray(rng.integers(0, 2, s.shape).astype(bool))
        elif s.low is not None:
            out[s.name] = np.asarray(rng.integers(int(s.low), int(s.high), s.shape).astype(s.dtype))
        else:
            out[s.name] = np.asarray(rng.standard_normal(s.shape).astype(_np_dtype(s.dtype)))
    return out


def _np_dtype(dtype: str):
    if dtype == "bfloat16":
        import ml_dtypes  # onnx depends on it: numpy's bfloat16
        return ml_dtypes.bfloat16
    return np.dtype(dtype)


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
    from ..limits import check_file_size
    from ..sources.safe_zip import _opened, open_zip
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
    """The .npz arrays as the model's dtypes (names, ranks and fixed dims were checked by resolve_inputs)."""
    return {s.name: np.asarray(arrays[s.name]).astype(_np_dtype(s.dtype), copy=False) for s in specs}


def parse_dim_flags(flags: list[str] | None) -> dict[str, int]:
    """--dim NAME=V (repeatable): every symbolic dim of that name, in every input."""
    out = {}
    for f in flags or []:
        name, _, v = f.partition("=")
        try:
            value = int(v)
            if not name or value <= 0:
                raise ValueError
        except ValueError:
            raise XcInputError(f"--dim '{f}': expected NAME=N with N a positive integer, e.g. height=640 or "
                               "sequence=128") from None
        out[name] = value
    return out


def parse_value_flags(flags: list[str] | None) -> dict[str, float]:
    """--value NAME=V (repeatable): every element of that input is V (a sample rate, a flag, a length)."""
    out = {}
    for f in flags or []:
        name, _, v = f.partition("=")
        try:
            if not name:
                raise ValueError
            out[name] = float(v)
        except ValueError:
            raise XcInputError(f"--value '{f}': expected NAME=NUMBER, e.g. sample_rate=16000") from None
    return out


def parse_range_flags(flags: list[str] | None) -> dict[str, tuple[float, float]]:
    """--range NAME=LOW:HIGH (repeatable): integer inputs drawn uniformly from [LOW, HIGH)."""
    out = {}
    for f in flags or []:
        name, _, v = f.partition("=")
        lo, _, hi = v.partition(":")
        try:
            low, high = int(lo), int(hi)
            if not name or high <= low:
                raise ValueError
        except ValueError:
            raise XcInputError(f"--range '{f}': expected NAME=LOW:HIGH with LOW < HIGH, e.g. input_ids=0:30522") \
                from None
        out[name] = (low, high)
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
