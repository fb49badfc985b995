"""Model inputs: seeded random values from the input specs, or the user's own .npz (loaded without pickle)."""
from __future__ import annotations

import zipfile

import numpy as np

from .errors import XcInputError
from .sources.spec import InputSpec, ShapeOverrides

SEED = 0


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


def read_npz(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:  # allow_pickle=False: object arrays are refused
            return {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise XcInputError(f"{path}: not a readable .npz of plain arrays ({type(e).__name__}); accepted: "
                           "numpy.savez with one array per model input") from None


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
        out[name] = (shape, dtype or None)
    return out
