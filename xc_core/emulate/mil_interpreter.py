"""A numpy interpreter for Core ML ML programs (MIL).

Core ML only predicts on macOS. To see what a compiled model computes on Linux, `run_program` walks the 'main'
function of a coremltools MIL `Program` op by op and executes each op with plain numpy, following the op
definitions in coremltools/converters/mil/mil/ops/defs (iOS15 … iOS18).

Dtypes follow the program: every op result is stored in its output var's dtype, so a program that casts to fp16
keeps fp16 tensors between ops and accumulates rounding error the way fp16 execution does. Inside one op, fp16
inputs are widened to fp32, the op is computed in fp32 and the result is rounded to fp16 (as fp16 hardware does
with its wider accumulators for matmul/conv/reductions).

An op the interpreter does not know raises `EmulationError("cannot emulate op <op_type> ...")`; nothing is ever
skipped silently. Each result's shape is checked against the shape the program declares, so a semantic slip in an
op shows up as an error at that op rather than as wrong numbers downstream.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


class EmulationError(RuntimeError):
    """The program contains something the interpreter cannot execute faithfully."""


def run_program(prog, inputs: dict[str, np.ndarray], record: bool = True
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Execute the 'main' function of a coremltools MIL Program (coremltools.converters.mil.mil.Program).

    inputs: by the main function's input names (cast to the input's declared dtype).
    Returns (outputs by output var name, intermediates by var name for every op output when record=True).
    Intermediates leave out `const` ops (they are the program's parameters, not computed values); inside a
    while_loop they hold the last iteration's values.
    """
    fn = prog.functions["main"]
    expected = list(fn.inputs)
    missing = [n for n in expected if n not in inputs]
    unknown = [n for n in inputs if n not in fn.inputs]
    if missing or unknown:
        raise ValueError(f"program inputs are {expected}; missing {missing}, unexpected {unknown}")

    env: dict[str, Any] = {}
    for name, var in fn.inputs.items():
        value = np.asarray(inputs[name])
        dtype = _np_dtype(var)
        if dtype is not None:
            value = value.astype(dtype, copy=False)
        declared = _static_shape(var)
        if declared == (1,) and value.ndim == 0:
            value = value.reshape(1)  # coremltools declares a scalar input as shape (1,); Core ML takes the scalar
        if declared is not None and tuple(value.shape) != declared:
            raise ValueError(f"input {name!r} has shape {tuple(value.shape)}; the program declares {declared}")
        env[name] = value

    intermediates: dict[str, np.ndarray] | None = {} if record else None
    _run_block(fn, env, intermediates)
    outputs = {var.name: env[var.name] for var in fn.outputs}
    return outputs, (intermediates if intermediates is not None else {})


# --- driver ------------------------------------------------------------------------------------------------

def _run_block(block, env: dict, record: dict | None) -> None:
    for op in block.operations:
        _run_op(op, env, record)


def _run_op(op, env: dict, record: dict | None) -> None:
    impl = OPS.get(op.op_type)
    if impl is None:
        raise EmulationError(f"cannot emulate op {op.op_type} ({op.name}): not implemented by the interpreter")
    try:
        result = impl(_Args(op, env, record))
    except EmulationError as exc:
        if str(exc).startswith("cannot emulate op"):  # already names its op (e.g. an op inside a cond block)
            raise
        raise EmulationError(f"cannot emulate op {op.op_type} ({op.name}): {exc}") from exc
    except Exception as exc:  # a malformed/unsupported combination of attributes: name the op, keep the cause
        raise EmulationError(f"cannot emulate op {op.op_type} ({op.name}): {type(exc).__name__}: {exc}") from exc

    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(op.outputs):
        raise EmulationError(f"cannot emulate op {op.op_type} ({op.name}): produced {len(results)} values for "
                             f"{len(op.outputs)} outputs")
    for var, value in zip(op.outputs, results):
        dtype = _np_dtype(var)
        value = np.asarray(value)
        if dtype is not None:
            with np.errstate(over="ignore", invalid="ignore"):  # fp16 overflow to inf is the emulated behaviour
                value = value.astype(dtype, copy=False)  # the program's dtype: fp16 results are rounded here
        declared = _static_shape(var)
        if declared is not None and tuple(value.shape) != declared:
            raise EmulationError(f"cannot emulate op {op.op_type} ({op.name}): computed shape {value.shape} for "
                                 f"{var.name} but the program declares {declared}")
        env[var.name] = value
        if record is not None and op.op_type != "const" and not op.op_type.startswith("constexpr_"):
            record[var.name] = value


def _np_dtype(var):
    """numpy dtype of a tensor/scalar var, or None for strings, states, lists…"""
    from coremltools.converters.mil.mil import types

    try:
        dtype = np.dtype(types.nptype_from_builtin(var.dtype))
    except Exception:
        return None
    return None if dtype.kind in "USO" else dtype


def _static_shape(var):
    try:
        shape = tuple(var.shape)
    except Exception:
        return None
    return shape if all(isinstance(d, (int, np.integer)) for d in shape) else None


def _widen(value):
    """fp16 inputs are computed in fp32 (the result is rounded back to the output var's dtype by the driver)."""
    if isinstance(value, np.ndarray) and value.dtype == np.float16:
        return value.astype(np.float32)
    if isinstance(value, np.float16):
        return np.float32(value)
    return value


class _Args:
    """An op's inputs by name: `a.x`, `a.weight`, `a.get("bias")`. Values are numpy (fp16 widened to fp32)."""

    def __init__(self, op, env: dict, record: dict | None):
        self.op = op
        self._env = env
        self._record = record

    def _value(self, v):
        if isinstance(v, (list, tuple)):
            return [self._value(item) for item in v]
        if v.name not in self._env:
            raise EmulationError(f"input {v.name} has no value")
        return _widen(self._env[v.name])

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        v = self.op.inputs.get(name)
        if v is None:
            raise EmulationError(f"required input {name!r} is missing")
        return self._value(v)

    def get(self, name: str, default=None):
        v = self.op.inputs.get(name)
        return default if v is None else self._value(v)

    def has(self, name: str) -> bool:
        return self.op.inputs.get(name) is not None

    def run_block(self, block) -> None:
        _run_block(block, self._env, self._record)

    def set(self, var, value) -> None:
        self._env[var.name] = value


def _ints(v) -> list[int]:
    return [int(i) for i in np.atleast_1d(np.asarray(v))]


def _axis(axis, rank: int) -> int:
    axis = int(axis)
    return axis + rank if axis < 0 else axis


def _axes(axes, rank: int) -> tuple[int, ...]:
    return tuple(_axis(a, rank) for a in _ints(axes))


def _str(v) -> str:
    return str(v.item() if isinstance(v, np.ndarray) else v)


def _float_like(x):
    """Compute dtype for transcendental math: ints are promoted to fp32."""
    return x if np.issubdtype(np.asarray(x).dtype, np.floating) else np.asarray(x, np.float32)


# --- constants, control flow, state ----------------------------------------------------------------------

def _const(a):
    val = a.op.outputs[0].val
    if val is None:
        raise EmulationError("the constant has no materialized value")
    return val if isinstance(val, str) else np.asarray(val)


def _constexpr(a):
    """Compressed weights (affine / palettized / sparse / blockwise): coremltools' own numpy decompression of the
    op class, fed from the values computed so far — an input may itself be a constexpr op's output (joint
    compression: a sparse mask over a palettized LUT …), which the op's `materialized_val_inference` cannot read."""
    import inspect
    decompress = getattr(type(a.op), "decompress", None)
    if decompress is None:   # constexpr_cast: no decompress, its input is always a const
        val = a.op.materialized_val_inference()
    else:
        args = {}
        for param in inspect.signature(decompress).parameters:
            var = a.op.inputs.get(param)
            args[param] = None if var is None else a._env[var.name]
        val = decompress(**args)
    return tuple(np.asarray(v) for v in val) if isinstance(val, (tuple, list)) else np.asarray(val)


def _cond(a):
    true_block, false_block = a.op.blocks
    block = true_block if bool(np.asarray(a.pred)) else false_block
    a.run_block(block)
    return tuple(a._env[v.name] for v in block.outputs)


_MAX_LOOP_ITERATIONS = 1_000_000


def _while_loop(a):
    cond_block, body_block = a.op.blocks
    values = [a._env[v.name] for v in a.op.inputs["loop_vars"]]
    for _ in range(_MAX_LOOP_ITERATIONS):
        for var, val in zip(cond_block.inputs, values):
            a.set(var, val)
        a.run_block(cond_block)
        if not bool(np.asarray(a._env[cond_block.outputs[0].name])):
            return tuple(values)
        for var, val in zip(body_block.inputs, values):
            a.set(var, val)
        a.run_block(body_block)
        values = [a._env[v.name] for v in body_block.outputs]
    raise EmulationError(f"more than {_MAX_LOOP_ITERATIONS} iterations")


def _read_state(a):
    return a.input  # the state's current value, passed in `inputs` under the state's name


def _update_state(a):
    value = a.value
    a.set(a.op.inputs["state"], value)
    return value


# --- elementwise --------------------------------------------------------------------------------------------

def _binary(fn: Callable) -> Callable:
    return lambda a: fn(a.x, a.y)


def _unary(fn: Callable) -> Callable:
    return lambda a: fn(a.x)


def _float_unary(fn: Callable) -> Callable:
    return lambda a: fn(_float_like(a.x))


_erf = np.vectorize(math.erf, otypes=[np.float64])  # numpy has no erf; math.erf is exact in float64


def _sigmoid(x):
    return np.exp(-np.logaddexp(0, -x))  # overflow-free form of 1 / (1 + exp(-x))


def _channel(p, x):
    """Per-channel parameter (length C) broadcast along axis 1 of x (NC…)."""
    p = np.asarray(p)
    return p.reshape((1, -1) + (1,) * (x.ndim - 2)) if p.ndim == 1 and x.ndim >= 2 else p


def _real_div(a):
    return np.true_divide(a.x, a.y)  # int inputs: the driver casts back to int32 (truncation), as declared


def _cast(a):
    # The driver converts every result to its output var's dtype, which is `dtype` here: fp32→fp16 rounds to
    # nearest even, float→int truncates toward zero, anything→bool is `!= 0`.
    return a.x


def _clip(a):
    return np.minimum(np.maximum(a.x, a.alpha), a.beta)


def _threshold(a):
    return np.maximum(a.x, a.alpha)


def _inverse(a):
    return 1.0 / (a.x + a.get("epsilon", 1e-4))


def _log(a):
    return np.log(_float_like(a.x) + a.get("epsilon", 1e-45))


def _rsqrt(a):
    return 1.0 / np.sqrt(_float_like(a.x) + a.get("epsilon", 1e-12))


def _select(a):
    return np.where(np.asarray(a.cond).astype(bool), a.a, a.b)


# --- activations ----------------------------------------------------------------------------------------------

def _gelu(a):
    x = a.x
    mode = _str(a.get("mode", "EXACT"))
    if mode == "EXACT":
        return 0.5 * x * (1.0 + _erf(x.astype(np.float64) / math.sqrt(2.0)).astype(x.dtype))
    if mode == "TANH_APPROXIMATION":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if mode == "SIGMOID_APPROXIMATION":
        return x * _sigmoid(1.702 * x)
    raise EmulationError(f"mode {mode} is not supported")


def _softmax(a):
    x = a.x
    axis = int(a.get("axis", -1))
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))  # max-subtracted: same value, no overflow
    return e / np.sum(e, axis=axis, keepdims=True)


def _elu(a):
    x = a.x
    return np.where(x > 0, x, a.get("alpha", 1.0) * np.expm1(np.minimum(x, 0)))


def _leaky_relu(a):
    x = a.x
    return np.where(x >= 0, x, a.get("alpha", 0.01) * x)


def _prelu(a):
    x = a.x
    return np.where(x > 0, x, _channel(a.alpha, x) * x)


def _clamped_relu(a):
    x, alpha, beta = a.x, a.alpha, a.beta
    return np.minimum(beta, np.where(x >= 0, x, alpha * x))


def _thresholded_relu(a):
    x = a.x
    return np.where(x >= a.get("alpha", 1.0), x, 0)


def _sigmoid_hard(a):
    return np.clip(a.get("alpha", 0.2) * a.x + a.get("beta", 0.5), 0, 1)


def _scaled_tanh(a):
    return a.get("alpha", 1.0) * np.tanh(a.get("beta", 1.0) * a.x)


def _linear_activation(a):
    return a.x * a.get("alpha", 1.0) + a.get("beta", 0.0)


def _softplus_parametric(a):
    x = a.x
    return _channel(a.alpha, x) * np.logaddexp(0, _channel(a.beta, x) * x)


# --- linear algebra -------------------------------------------------------------------------------------------

def _linear(a):
    x, w = a.x, a.weight  # weight is [D_out, D_in]
    y = np.matmul(x, w.T)
    return y + a.bias if a.has("bias") else y


def _matmul(a):
    x, y = a.x, a.y
    # transpose flags swap the last two dims and have no effect on 1-D operands
    if bool(a.get("transpose_x", False)) and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    if bool(a.get("transpose_y", False)) and y.ndim >= 2:
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _einsum(a):
    return np.einsum(_str(a.equation), *a.values)


def _sdpa(a):
    q, k, v = a.query, a.key, a.value
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if a.has("attn_mask"):
        mask = a.attn_mask
        # bool mask: True takes part in attention; float mask: added to the scores
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    return np.matmul(e / np.sum(e, axis=-1, keepdims=True), v)


# --- convolution and pooling ---------------------------------------------------------------------------------

def _spatial_pads(pad_type: str, pad, in_sizes, kernel, strides) -> list[tuple[int, int]]:
    """(before, after) padding per spatial dim, as coremltools' `aggregated_pad` defines it."""
    n = len(in_sizes)
    if pad_type == "valid":
        return [(0, 0)] * n
    if pad_type == "custom":
        p = _ints(pad)
        return [(p[2 * i], p[2 * i + 1]) for i in range(n)]
    if pad_type in ("same", "same_lower"):
        pads = []
        for i, k, s in zip(in_sizes, kernel, strides):
            total = max(0, s * math.ceil(i / s) - i + k - s)
            # same: the odd extra element goes after; same_lower: before
            before = total // 2 if pad_type == "same" else total - total // 2
            pads.append((before, total - before))
        return pads
    raise EmulationError(f"pad_type {pad_type} is not supported")


def _conv(a):
    x, w = a.x, a.weight  # x [N, C_in, *D], w [C_out, C_in/groups, *K]
    nd = x.ndim - 2
    strides = _ints(a.get("strides", [1] * nd))
    dilations = _ints(a.get("dilations", [1] * nd))
    groups = int(a.get("groups", 1))
    kernel = w.shape[2:]
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    pads = _spatial_pads(_str(a.get("pad_type", "valid")), a.get("pad", [0] * 2 * nd), x.shape[2:], eff, strides)
    xp = np.pad(x, [(0, 0), (0, 0)] + pads)

    # im2col: windows [N, C_in, *D_out, *K] (strides on the output dims, dilation inside the window)
    win = sliding_window_view(xp, eff, axis=tuple(range(2, 2 + nd)))
    win = win[(slice(None),) * 2 + tuple(slice(None, None, s) for s in strides)
              + tuple(slice(None, None, d) for d in dilations)]
    n, c_in = x.shape[:2]
    out_sizes = win.shape[2:2 + nd]
    c_out, g = w.shape[0], groups
    positions, taps = int(np.prod(out_sizes)), int(np.prod(kernel))
    cols = win.reshape(n, g, c_in // g, positions, taps).transpose(1, 0, 3, 2, 4)
    cols = cols.reshape(g, n * positions, (c_in // g) * taps)
    wg = w.reshape(g, c_out // g, (c_in // g) * taps)
    y = np.matmul(cols, wg.transpose(0, 2, 1))                      # [g, N*P, C_out/g]
    y = y.reshape(g, n, positions, c_out // g).transpose(1, 0, 3, 2).reshape(n, c_out, *out_sizes)
    if a.has("bias"):
        y = y + _channel(a.bias, y)
    return y


def _conv_transpose(a):
    x, w = a.x, a.weight  # x [N, C_in, *D], w [C_in, C_out/groups, *K]
    nd = x.ndim - 2
    strides = _ints(a.get("strides", [1] * nd))
    dilations = _ints(a.get("dilations", [1] * nd))
    g = int(a.get("groups", 1))
    n, c_in = x.shape[:2]
    in_sizes, kernel = x.shape[2:], w.shape[2:]
    c_out_g = w.shape[1]
    c_out = c_out_g * g
    positions, taps = int(np.prod(in_sizes)), int(np.prod(kernel))

    # every input position scatters x * w[k] to output position i*stride + k*dilation of the uncropped output
    xr = x.reshape(n, g, c_in // g, positions).transpose(1, 0, 3, 2)           # [g, N, P, C_in/g]
    wr = w.reshape(g, 1, c_in // g, c_out_g * taps)
    contrib = np.matmul(xr, wr).reshape(g, n, positions, c_out_g, taps)
    contrib = contrib.transpose(1, 0, 3, 4, 2).reshape(n, c_out, taps, *in_sizes)
    full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(in_sizes, strides, kernel, dilations)]
    y = np.zeros((n, c_out, *full), dtype=contrib.dtype)
    for t, kpos in enumerate(np.ndindex(*kernel)):
        region = tuple(slice(kp * d, kp * d + (i - 1) * s + 1, s)
                       for kp, d, i, s in zip(kpos, dilations, in_sizes, strides))
        y[(slice(None), slice(None)) + region] += contrib[:, :, t]

    # crop the uncropped output to the declared size
    pad_type = _str(a.get("pad_type", "valid"))
    pad = _ints(a.get("pad", [0] * 2 * nd))
    if a.has("output_shape"):
        out_sizes = _ints(a.output_shape)[2:]
    elif pad_type in ("same", "same_lower"):
        out_sizes = [i * s for i, s in zip(in_sizes, strides)]
    elif pad_type == "custom":
        out_sizes = [f - pad[2 * i] - pad[2 * i + 1] for i, f in enumerate(full)]
    else:
        out_sizes = full
    if pad_type == "custom":
        starts = [pad[2 * i] for i in range(nd)]
    elif pad_type in ("same", "same_lower"):
        # the forward conv's SAME padding: total = full - out, the odd element after (same) / before (same_lower)
        totals = [max(f - o, 0) for f, o in zip(full, out_sizes)]
        starts = [t // 2 if pad_type == "same" else t - t // 2 for t in totals]
    else:
        starts = [0] * nd
    out = np.zeros((n, c_out, *out_sizes), dtype=y.dtype)
    # output_shape may ask for more than the uncropped output (torch output_padding): those positions get bias only
    src = tuple(slice(s, min(s + o, f)) for s, o, f in zip(starts, out_sizes, full))
    dst = tuple(slice(0, max(0, min(s + o, f) - s)) for s, o, f in zip(starts, out_sizes, full))
    out[(slice(None), slice(None)) + dst] = y[(slice(None), slice(None)) + src]
    if a.has("bias"):
        out = out + _channel(a.bias, out)
    return out


def _pool_windows(a, fill: float):
    """Windows [N, C, *D_out, *K] of the padded input, and 0/1 masks of the cells that are real input and that are
    real input or explicit padding."""
    x = a.x
    nd = x.ndim - 2
    kernel = _ints(a.kernel_sizes)
    strides = _ints(a.get("strides", [1] * nd))
    pads = _spatial_pads(_str(a.get("pad_type", "valid")).lower(), a.get("pad", [0] * 2 * nd), x.shape[2:],
                         kernel, strides)
    ceil_mode = bool(a.get("ceil_mode", False))
    extra, outs = [], []
    for i, k, s, (pb, pa) in zip(x.shape[2:], kernel, strides, pads):
        span = i + pb + pa - k
        out = (math.ceil(span / s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= i + pb and (pb > 0 or pa > 0):
            out -= 1  # coremltools' rule: the last window must start inside the input or left padding
        extra.append(max(0, (out - 1) * s + k - (i + pb + pa)))  # ceil_mode overhang past the padding
        outs.append(out)

    def windows(t, pad_value, overhang_value):
        t = np.pad(t, [(0, 0), (0, 0)] + list(pads), constant_values=pad_value)
        t = np.pad(t, [(0, 0), (0, 0)] + [(0, e) for e in extra], constant_values=overhang_value)
        win = sliding_window_view(t, kernel, axis=tuple(range(2, 2 + nd)))
        return win[(slice(None),) * 2 + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(outs, strides))]

    # avg divisors: cells inside the input, or inside input + explicit padding (never the ceil_mode overhang)
    real = np.ones((1, 1) + x.shape[2:], dtype=np.float32)
    return windows(x, fill, fill), windows(real, 0.0, 0.0), windows(real, 1.0, 0.0), nd


def _max_pool(a):
    win, _, _, nd = _pool_windows(a, -np.inf)
    return win.max(axis=tuple(range(-nd, 0)))


def _avg_pool(a):
    win, real, padded, nd = _pool_windows(a, 0.0)
    axes = tuple(range(-nd, 0))
    counts = real if bool(a.get("exclude_padding_from_average", False)) else padded
    return win.sum(axis=axes) / counts.sum(axis=axes)


def _l2_pool(a):
    win, _, _, nd = _pool_windows(a, 0.0)
    return np.sqrt(np.sum(win * win, axis=tuple(range(-nd, 0))))


# --- normalization ---------------------------------------------------------------------------------------------

def _batch_norm(a):
    x = a.x
    y = (x - _channel(a.mean, x)) / np.sqrt(_channel(a.variance, x) + a.get("epsilon", 1e-5))
    if a.has("gamma"):
        y = y * _channel(a.gamma, x)
    if a.has("beta"):
        y = y + _channel(a.beta, x)
    return y


def _instance_norm(a):
    x = a.x
    axes = tuple(range(2, x.ndim))  # per sample and channel, over the spatial dims
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + a.get("epsilon", 1e-5))
    if a.has("gamma"):
        y = y * _channel(a.gamma, x)
    if a.has("beta"):
        y = y + _channel(a.beta, x)
    return y


def _layer_norm(a):
    x = a.x
    axes = _axes(a.axes, x.ndim) if a.has("axes") else tuple(range(x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)  # biased variance, as torch / the op definition
    y = (x - mean) / np.sqrt(var + a.get("epsilon", 1e-5))
    # gamma/beta have shape x.shape[axes]: place them on those axes (not necessarily the trailing ones)
    param_shape = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
    if a.has("gamma"):
        y = y * np.reshape(a.gamma, param_shape)
    if a.has("beta"):
        y = y + np.reshape(a.beta, param_shape)
    return y


def _l2_norm(a):
    x = a.x
    axes = tuple(range(max(0, x.ndim - 3), x.ndim))  # the last 3 dims; leading dims are batch
    return x / np.sqrt(np.sum(x * x, axis=axes, keepdims=True) + a.get("epsilon", 1e-6))


def _local_response_norm(a):
    x = a.x
    size = int(a.size)
    # Only what is unambiguous: NCHW with an odd window centred on the channel (what the TensorFlow frontend, the
    # one converter that emits this op, writes). For rank 3 the op definition says [n, C, D] (channels on axis 1)
    # while coremltools' own expected values normalize over axis 0 (the [C, H, W] of the NeuralNetwork layer); for
    # an even size nothing says on which side the extra channel lies.
    if x.ndim != 4:
        raise EmulationError(f"rank {x.ndim}: the channel axis of a rank-{x.ndim} input is not defined unambiguously "
                             "(rank 4, NCHW, is)")
    if size % 2 == 0:
        raise EmulationError(f"size {size}: an even window's placement is not defined (odd sizes are)")
    sq = np.pad(x * x, [(0, 0), (size // 2, size // 2)] + [(0, 0)] * (x.ndim - 2))
    window_sum = sliding_window_view(sq, size, axis=1).sum(axis=-1)
    return x / (a.get("k", 1.0) + a.get("alpha", 1e-4) / size * window_sum) ** a.get("beta", 0.75)


# --- reductions ------------------------------------------------------------------------------------------------

def _reduce(fn: Callable) -> Callable:
    def run(a):
        x = a.x
        axes = _axes(a.axes, x.ndim) if a.has("axes") else None
        return fn(x, axes, bool(a.get("keep_dims", False)))
    return run


def _log_sum_exp(x, axes, keep):
    m = np.max(x, axis=axes, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keep else np.squeeze(out, axis=axes)


_REDUCTIONS = {
    "reduce_sum": lambda x, ax, k: np.sum(x, axis=ax, keepdims=k),
    "reduce_mean": lambda x, ax, k: np.mean(x, axis=ax, keepdims=k),
    "reduce_max": lambda x, ax, k: np.max(x, axis=ax, keepdims=k),
    "reduce_min": lambda x, ax, k: np.min(x, axis=ax, keepdims=k),
    "reduce_prod": lambda x, ax, k: np.prod(x, axis=ax, keepdims=k),
    "reduce_sum_square": lambda x, ax, k: np.sum(x * x, axis=ax, keepdims=k),
    "reduce_l1_norm": lambda x, ax, k: np.sum(np.abs(x), axis=ax, keepdims=k),
    "reduce_l2_norm": lambda x, ax, k: np.sqrt(np.sum(x * x, axis=ax, keepdims=k)),
    "reduce_log_sum": lambda x, ax, k: np.log(np.sum(x, axis=ax, keepdims=k)),
    "reduce_log_sum_exp": _log_sum_exp,
}


def _reduce_arg(fn: Callable) -> Callable:
    def run(a):
        x = a.x
        axis = _axis(a.get("axis", -1), x.ndim)
        out = fn(x, axis=axis)
        return np.expand_dims(out, axis) if bool(a.get("keep_dims", False)) else out
    return run


# --- shape and layout ------------------------------------------------------------------------------------------

def _reshape(a):
    x = a.x
    shape = _ints(a.shape)
    # A 0 copies the matching dim of x, the two shapes aligned on the right (iOS15/16 require len(shape) ==
    # rank(x), where that is the same dim); a 0 with no matching dim is 1 (iOS17).
    offset = x.ndim - len(shape)
    shape = [(x.shape[i + offset] if 0 <= i + offset < x.ndim else 1) if s == 0 else s for i, s in enumerate(shape)]
    return np.reshape(x, shape)


def _reshape_like(a):
    shape = []
    for ref, begin, end, end_mask in zip(a.ref_tensors, _ints(a.begins), _ints(a.ends), a.end_masks):
        shape.extend(ref.shape[begin:] if bool(end_mask) else ref.shape[begin:end])
    return np.reshape(a.x, shape)


def _transpose(a):
    return np.transpose(a.x, _ints(a.perm))


def _expand_dims(a):
    x = a.x
    out_rank = x.ndim + len(_ints(a.axes))
    return np.expand_dims(x, tuple(sorted(_axes(a.axes, out_rank))))


def _squeeze(a):
    x = a.x
    if not a.has("axes"):
        return np.squeeze(x)
    # torch semantics: listed axes that are not of size 1 are kept
    return np.squeeze(x, axis=tuple(ax for ax in _axes(a.axes, x.ndim) if x.shape[ax] == 1))


def _flatten2d(a):
    x = a.x
    axis = _axis(a.get("axis", 1), x.ndim)
    return x.reshape(int(np.prod(x.shape[:axis])), -1)


def _concat(a):
    values = [np.asarray(v) for v in a.values]
    axis = _axis(a.axis, values[0].ndim)
    if bool(a.get("interleave", False)):
        # one slice of each input in turn: [a0, b0, a1, b1, …] along axis
        stacked = np.stack(values, axis=axis + 1)
        shape = list(values[0].shape)
        shape[axis] *= len(values)
        return stacked.reshape(shape)
    return np.concatenate(values, axis=axis)


def _split(a):
    x = a.x
    axis = _axis(a.axis, x.ndim)
    if a.has("split_sizes"):
        sizes = _ints(a.split_sizes)
    else:
        n = int(a.num_splits)
        sizes = [x.shape[axis] // n] * n
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _stack(a):
    values = [np.asarray(v) for v in a.values]
    return np.stack(values, axis=_axis(a.axis, values[0].ndim + 1))


def _tile(a):
    return np.tile(a.x, _ints(a.reps))


def _pad(a):
    x = a.x
    p = _ints(a.pad)
    n = len(p) // 2  # the pad list covers the last n dims
    widths = [(0, 0)] * (x.ndim - n) + [(p[2 * i], p[2 * i + 1]) for i in range(n)]
    mode = _str(a.get("mode", "constant"))
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=a.get("constant_val", 0.0))
    if mode in ("reflect", "replicate"):
        return np.pad(x, widths, mode="reflect" if mode == "reflect" else "edge")
    raise EmulationError(f"mode {mode} is not supported")


def _slices(a, shape):
    """numpy slices of slice_by_index / slice_update, and the axes that squeeze_mask removes."""
    rank = len(shape)
    begin, end = _ints(a.begin), _ints(a.end)
    stride = _ints(a.get("stride", [1] * rank))
    begin_mask = [bool(m) for m in np.atleast_1d(a.get("begin_mask", [False] * rank))]
    end_mask = [bool(m) for m in np.atleast_1d(a.get("end_mask", [False] * rank))]
    squeeze_mask = [bool(m) for m in np.atleast_1d(a.get("squeeze_mask", [False] * rank))]
    slices = []
    for i in range(rank):
        b = None if begin_mask[i] else begin[i]
        if squeeze_mask[i]:
            slices.append(slice(b, None, np.iinfo(np.int32).max))  # exactly the element at begin, as coremltools
        else:
            slices.append(slice(b, None if end_mask[i] else end[i], stride[i]))
    return tuple(slices), tuple(i for i in range(rank) if squeeze_mask[i])


def _slice_by_index(a):
    x = a.x
    slices, squeezed = _slices(a, x.shape)
    return np.squeeze(x[slices], axis=squeezed)


def _slice_by_size(a):
    x = a.x
    begin, size = _ints(a.begin), _ints(a.size)
    slices = []
    for b, s, dim in zip(begin, size, x.shape):
        b = b + dim if b < 0 else b
        slices.append(slice(b, None if s == -1 else b + s))  # size -1: to the end
    return x[tuple(slices)]


def _slice_update(a):
    out = np.array(a.x, copy=True)
    slices, _ = _slices(a, out.shape)
    out[slices] = np.reshape(a.update, out[slices].shape)
    return out


def _crop(a):
    x = a.x
    (top, bottom), (left, right) = _ints(a.crop_height), _ints(a.crop_width)
    return x[..., top:x.shape[-2] - bottom, left:x.shape[-1] - right]


def _reverse(a):
    x = a.x
    return np.flip(x, axis=_axes(a.axes, x.ndim) if a.has("axes") else None)


def _depth_to_space(a):
    # TF's DCR order in NCHW: channel index = (i * b + j) * C_out + c
    x, b = a.x, int(a.block_size)
    n, c, h, w = x.shape
    return x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(a):
    x, b = a.x, int(a.block_size)
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


def _pixel_shuffle(a):
    # torch's CRD order: channel index = c * f * f + i * f + j
    x, f = a.x, int(a.upscale_factor)
    n, c, h, w = x.shape
    return x.reshape(n, c // (f * f), f, f, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (f * f), h * f, w * f)


def _pixel_unshuffle(a):
    x, f = a.x, int(a.downscale_factor)
    n, c, h, w = x.shape
    return x.reshape(n, c, h // f, f, w // f, f).transpose(0, 1, 3, 5, 2, 4).reshape(n, c * f * f, h // f, w // f)


def _sliding_windows(a):
    x = a.x
    axis = _axis(a.axis, x.ndim)
    win = sliding_window_view(x, int(a.size), axis=axis)
    win = win[(slice(None),) * axis + (slice(None, None, int(a.get("stride", 1))),)]
    return np.moveaxis(win, -1, axis + 1)  # [*d0, n_windows, size, *dn]


# --- gather / scatter ------------------------------------------------------------------------------------------

def _indices(idx, dim_sizes):
    """Indices as int64; negatives count from the end (iOS15/16 semantics; iOS17 converters emit only
    non-negative ones). Out-of-range indices are undefined behaviour in Core ML: refuse rather than guess."""
    idx = np.asarray(idx).astype(np.int64)
    dims = np.asarray(dim_sizes, dtype=np.int64)
    if np.any(idx >= dims) or np.any(idx < -dims):
        raise EmulationError("indices out of range (undefined behaviour in Core ML)")
    return np.where(idx < 0, idx + dims, idx)


def _gather(a):
    x = a.x
    axis = _axis(a.get("axis", 0), x.ndim)
    batch_dims = int(a.get("batch_dims", 0))
    idx = _indices(a.indices, x.shape[axis])
    if batch_dims == 0:
        return np.take(x, idx, axis=axis)
    # batch_dims leading dims are shared by x and indices: gather within each batch element
    lead = x.shape[:batch_dims]
    xb = x.reshape((-1,) + x.shape[batch_dims:])
    ib = idx.reshape((-1,) + idx.shape[batch_dims:])
    out = np.stack([np.take(xb[i], ib[i], axis=axis - batch_dims) for i in range(xb.shape[0])])
    return out.reshape(lead + out.shape[1:])


def _gather_along_axis(a):
    x = a.x
    axis = _axis(a.get("axis", 0), x.ndim)
    return np.take_along_axis(x, _indices(a.indices, x.shape[axis]), axis=axis)


def _gather_nd(a):
    x, indices = a.x, np.asarray(a.indices)
    batch_dims = int(a.get("batch_dims", 0))
    k = indices.shape[-1]

    def one(xs, ids):
        ids = _indices(ids, xs.shape[:k])
        return xs[tuple(np.moveaxis(ids, -1, 0))]

    if batch_dims == 0:
        return one(x, indices)
    lead = x.shape[:batch_dims]
    xb = x.reshape((-1,) + x.shape[batch_dims:])
    ib = indices.reshape((-1,) + indices.shape[batch_dims:])
    out = np.stack([one(xb[i], ib[i]) for i in range(xb.shape[0])])
    return out.reshape(lead + out.shape[1:])


def _scatter_into(target, index, updates, mode: str):
    if mode == "update":
        target[index] = updates
        return
    ufunc = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
             "max": np.maximum, "min": np.minimum}.get(mode)
    if ufunc is None:
        raise EmulationError(f"mode {mode} is not supported")
    ufunc.at(target, index, updates)  # unbuffered: repeated indices accumulate


def _scatter(a):
    out = np.array(a.data, copy=True)
    axis = _axis(a.get("axis", 0), out.ndim)
    idx = _indices(a.indices, out.shape[axis])
    # move `axis` first so that indices select along dim 0 of a view of out
    _scatter_into(np.moveaxis(out, axis, 0), idx, np.moveaxis(a.updates, axis, 0), _str(a.get("mode", "add")))
    return out


def _scatter_along_axis(a):
    out = np.array(a.data, copy=True)
    axis = _axis(a.get("axis", 0), out.ndim)
    idx = _indices(a.indices, out.shape[axis])
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    _scatter_into(out, tuple(grid), a.updates, _str(a.get("mode", "add")))
    return out


def _scatter_nd(a):
    out = np.array(a.data, copy=True)
    indices = np.asarray(a.indices)
    idx = _indices(indices, out.shape[:indices.shape[-1]])
    _scatter_into(out, tuple(np.moveaxis(idx, -1, 0)), a.updates, _str(a.get("mode", "add")))
    return out


# --- tensor creation and misc ---------------------------------------------------------------------------------

def _range_1d(a):
    return np.arange(a.start, a.end, a.step)


def _fill(a):
    return np.full(_ints(a.shape), a.get("value", 0.0))


def _fill_like(a):
    return np.full(np.shape(a.ref_tensor), a.get("value", 0.0))


def _shape(a):
    return np.array(np.shape(a.x), dtype=np.int32)


def _band_part(a):
    x = a.x
    lower, upper = int(a.get("lower", -1)), int(a.get("upper", -1))
    m = np.arange(x.shape[-2])[:, None]
    n = np.arange(x.shape[-1])[None, :]
    band = ((lower < 0) | (m - n <= lower)) & ((upper < 0) | (n - m <= upper))
    return np.where(band, x, np.zeros((), x.dtype))


def _cumsum(a):
    x = a.x
    axis = _axis(a.get("axis", 0), x.ndim)
    reverse, exclusive = bool(a.get("reverse", False)), bool(a.get("exclusive", False))
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis)
    if exclusive:
        out = out - x  # each element excludes itself
    return np.flip(out, axis) if reverse else out


def _sort_order(x, axis: int, ascending: bool):
    # stable, and for ties the lower index first in both directions
    key = x if ascending else -(x.astype(np.float64) if np.issubdtype(x.dtype, np.integer) else x)
    return np.argsort(key, axis=axis, kind="stable")


def _topk(a):
    x = a.x
    axis = _axis(a.get("axis", -1), x.ndim)
    order = _sort_order(x, axis, bool(a.get("ascending", False)))
    order = np.take(order, np.arange(int(a.get("k", 1))), axis=axis)
    values = np.take_along_axis(x, order, axis=axis)
    return (values, order) if bool(a.get("return_indices", True)) else values


def _argsort(a):
    x = a.x
    return _sort_order(x, _axis(a.get("axis", -1), x.ndim), bool(a.get("ascending", False)))


def _one_hot(a):
    idx = np.asarray(a.indices).astype(np.int64)
    depth = int(a.one_hot_vector_size)
    axis = _axis(a.get("axis", -1), idx.ndim + 1)
    hot = np.moveaxis(idx[..., None] == np.arange(depth), -1, axis)
    return np.where(hot, a.get("on_value", 1), a.get("off_value", 0))


def _non_zero(a):
    return np.transpose(np.nonzero(a.x))


def _quantize(a):
    x = a.input
    scale, zero = _axis_param(a, a.scale, x), _axis_param(a, a.get("zero_point", 0), x)
    info = np.iinfo(np.dtype(_str(a.output_dtype)))
    return np.clip(np.round(x / scale) + zero, info.min, info.max)


def _dequantize(a):
    x = a.input.astype(np.float32)
    scale, zero = _axis_param(a, a.scale, x), _axis_param(a, a.get("zero_point", 0), x)
    return (x - zero) * scale


def _axis_param(a, p, x):
    """A quantization scale/zero point: scalar, or a vector along `axis`."""
    p = np.asarray(p)
    if p.ndim == 0:
        return p
    shape = [1] * x.ndim
    shape[_axis(a.axis, x.ndim)] = -1
    return p.reshape(shape)


# --- resizing --------------------------------------------------------------------------------------------------

def _grid(n_in: int, n_out: int, mode: str) -> np.ndarray:
    """Source coordinates of each output position, per the sampling modes of resize_bilinear."""
    i = np.arange(n_out, dtype=np.float64)
    if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        if n_out == 1:
            g = np.full(1, 0.0 if mode == "STRICT_ALIGN_CORNERS" else (n_in - 1) / 2)
        else:
            g = i * (n_in - 1) / (n_out - 1)
    elif mode == "DEFAULT":
        g = i * n_in / n_out
    elif mode == "OFFSET_CORNERS":
        delta = max(1, n_in - 1) / n_out
        g = 0.5 * delta + i * delta
    elif mode == "UNALIGN_CORNERS":
        g = (i + 0.5) * n_in / n_out - 0.5
    else:
        raise EmulationError(f"sampling_mode {mode} is not supported")
    return np.clip(g, 0, n_in - 1)


def _lerp_axis(x, axis: int, grid: np.ndarray):
    lo = np.floor(grid).astype(np.int64)
    hi = np.minimum(lo + 1, x.shape[axis] - 1)
    shape = [1] * x.ndim
    shape[axis] = -1
    w = (grid - lo).reshape(shape).astype(x.dtype)
    return np.take(x, lo, axis=axis) * (1 - w) + np.take(x, hi, axis=axis) * w


def _bilinear(x, out_h: int, out_w: int, mode: str):
    x = _lerp_axis(x, x.ndim - 2, _grid(x.shape[-2], out_h, mode))
    return _lerp_axis(x, x.ndim - 1, _grid(x.shape[-1], out_w, mode))


def _nearest_source(n_in: int, n_out: int, half_pixel: bool = False) -> np.ndarray:
    """Source index of each output position, in exact integer arithmetic: floor(i * n_in / n_out) (the legacy
    rule of TensorFlow's and torch's `nearest`), or with half-pixel centres floor((i + 0.5) * n_in / n_out)."""
    i = np.arange(n_out, dtype=np.int64)
    src = (2 * i + 1) * n_in // (2 * n_out) if half_pixel else i * n_in // n_out
    return np.minimum(src, n_in - 1)


def _nearest(x, out_h: int, out_w: int, half_pixel: bool = False):
    rows = _nearest_source(x.shape[-2], out_h, half_pixel)
    return np.take(np.take(x, rows, axis=-2), _nearest_source(x.shape[-1], out_w, half_pixel), axis=-1)


def _upsample_nearest_neighbor(a):
    x = a.x
    sh, sw = float(a.get("scale_factor_height", 1)), float(a.get("scale_factor_width", 1))
    # The output size is floor(in * scale); each position then takes floor(i * in / out), not floor(i / scale):
    # coremltools' own expected values for fractional scales (1.12 on a width of 3 gives [0, 1, 2], where
    # floor(i / 1.12) would give [0, 0, 1]), and the rule of the frontends that emit the op.
    return _nearest(x, int(math.floor(x.shape[-2] * sh)), int(math.floor(x.shape[-1] * sw)))


def _resize_nearest_neighbor(a):
    # Half-pixel centres: the TensorFlow frontend emits this op for ResizeNearestNeighbor with
    # half_pixel_centers=True (and upsample_nearest_neighbor without), and iOS17 `resize`'s expected values agree.
    return _nearest(a.x, int(a.target_size_height), int(a.target_size_width), half_pixel=True)


def _upsample_bilinear(a):
    x = a.x
    sh, sw = float(a.get("scale_factor_height", 1)), float(a.get("scale_factor_width", 1))
    out_h, out_w = int(math.floor(x.shape[-2] * sh)), int(math.floor(x.shape[-1] * sw))
    align = bool(a.get("align_corners", True))
    half_pixel = bool(a.get("half_pixel_centers", not align))
    # align_corners ↔ STRICT_ALIGN_CORNERS; half-pixel centers ↔ UNALIGN_CORNERS; neither ↔ DEFAULT (i*in/out)
    mode = "STRICT_ALIGN_CORNERS" if align else ("UNALIGN_CORNERS" if half_pixel else "DEFAULT")
    return _bilinear(x, out_h, out_w, mode)


def _resize_bilinear(a):
    return _bilinear(a.x, int(a.get("target_size_height", 1)), int(a.get("target_size_width", 1)),
                     _str(a.get("sampling_mode", "DEFAULT")))


def _resize(a):
    x = a.x
    dims = int(a.resized_dims)
    target = _ints(a.shape)[-dims:] if dims else []
    sizes = [x.shape[x.ndim - dims + i] if t == 0 else t for i, t in enumerate(target)]
    interpolation = _str(a.get("interpolation_mode", "LINEAR"))
    mode = _str(a.get("sampling_mode", "DEFAULT"))
    for i, size in enumerate(sizes):
        axis = x.ndim - dims + i
        if interpolation == "LINEAR":
            x = _lerp_axis(x, axis, _grid(x.shape[axis], size, mode))
        elif interpolation == "NEAREST_NEIGHBOR" and mode == "DEFAULT":
            # as resize_nearest_neighbor, which the TensorFlow frontend swaps for this op when sizes are dynamic
            x = np.take(x, _nearest_source(x.shape[axis], size, half_pixel=True), axis=axis)
        else:
            raise EmulationError(f"{interpolation} with sampling_mode {mode} is not supported")
    return x


# --- dispatch table --------------------------------------------------------------------------------------------

OPS: dict[str, Callable[[_Args], Any]] = {
    # constants, control flow, state
    "const": _const,
    "cond": _cond,
    "while_loop": _while_loop,
    "identity": lambda a: a.x,
    "read_state": _read_state,
    "coreml_update_state": _update_state,
    # elementwise binary (numpy broadcasting = MIL broadcasting)
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "real_div": _real_div,
    "floor_div": _binary(np.floor_divide),
    "mod": _binary(np.mod),  # the op's value_inference uses Python's %, i.e. the sign of y
    "pow": _binary(np.power),
    "maximum": _binary(np.maximum),
    "minimum": _binary(np.minimum),
    "equal": _binary(np.equal),
    "not_equal": _binary(np.not_equal),
    "greater": _binary(np.greater),
    "greater_equal": _binary(np.greater_equal),
    "less": _binary(np.less),
    "less_equal": _binary(np.less_equal),
    "logical_and": _binary(np.logical_and),
    "logical_or": _binary(np.logical_or),
    "logical_xor": _binary(np.logical_xor),
    # elementwise unary
    "logical_not": _unary(np.logical_not),
    "abs": _unary(np.abs),
    "sign": _unary(np.sign),
    "square": _unary(np.square),
    "ceil": _unary(np.ceil),
    "floor": _unary(np.floor),
    "round": _unary(np.round),  # half to even: 0.5 → 0, as the op definition says
    "exp": _float_unary(np.exp),
    "exp2": _float_unary(np.exp2),
    "sqrt": _float_unary(np.sqrt),
    "sin": _float_unary(np.sin),
    "cos": _float_unary(np.cos),
    "tan": _float_unary(np.tan),
    "asin": _float_unary(np.arcsin),
    "acos": _float_unary(np.arccos),
    "atan": _float_unary(np.arctan),
    "sinh": _float_unary(np.sinh),
    "cosh": _float_unary(np.cosh),
    "tanh": _float_unary(np.tanh),
    "atanh": _float_unary(np.arctanh),
    "erf": _float_unary(lambda x: _erf(x.astype(np.float64))),
    "log": _log,
    "rsqrt": _rsqrt,
    "inverse": _inverse,
    "clip": _clip,
    "threshold": _threshold,
    "cast": _cast,
    "select": _select,
    # activations
    "relu": _unary(lambda x: np.maximum(x, 0)),
    "relu6": _unary(lambda x: np.clip(x, 0, 6)),
    "sigmoid": _float_unary(_sigmoid),
    "sigmoid_hard": _sigmoid_hard,
    "silu": _float_unary(lambda x: x * _sigmoid(x)),
    "softplus": _float_unary(lambda x: np.logaddexp(0, x)),
    "softsign": _float_unary(lambda x: x / (1 + np.abs(x))),
    "gelu": _gelu,
    "softmax": _softmax,
    "elu": _elu,
    "leaky_relu": _leaky_relu,
    "prelu": _prelu,
    "clamped_relu": _clamped_relu,
    "thresholded_relu": _thresholded_relu,
    "scaled_tanh": _scaled_tanh,
    "linear_activation": _linear_activation,
    "softplus_parametric": _softplus_parametric,
    # linear algebra
    "linear": _linear,
    "matmul": _matmul,
    "einsum": _einsum,
    "scaled_dot_product_attention": _sdpa,
    # convolution, pooling
    "conv": _conv,
    "conv_transpose": _conv_transpose,
    "max_pool": _max_pool,
    "avg_pool": _avg_pool,
    "l2_pool": _l2_pool,
    # normalization
    "batch_norm": _batch_norm,
    "instance_norm": _instance_norm,
    "layer_norm": _layer_norm,
    "l2_norm": _l2_norm,
    "local_response_norm": _local_response_norm,
    # reductions
    **{name: _reduce(fn) for name, fn in _REDUCTIONS.items()},
    "reduce_argmax": _reduce_arg(np.argmax),
    "reduce_argmin": _reduce_arg(np.argmin),
    # shape and layout
    "reshape": _reshape,
    "reshape_like": _reshape_like,
    "transpose": _transpose,
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "flatten2d": _flatten2d,
    "concat": _concat,
    "split": _split,
    "stack": _stack,
    "tile": _tile,
    "pad": _pad,
    "slice_by_index": _slice_by_index,
    "slice_by_size": _slice_by_size,
    "slice_update": _slice_update,
    "reverse": _reverse,
    "crop": _crop,
    "depth_to_space": _depth_to_space,
    "space_to_depth": _space_to_depth,
    "pixel_shuffle": _pixel_shuffle,
    "pixel_unshuffle": _pixel_unshuffle,
    "sliding_windows": _sliding_windows,
    # gather / scatter
    "gather": _gather,
    "gather_along_axis": _gather_along_axis,
    "gather_nd": _gather_nd,
    "scatter": _scatter,
    "scatter_along_axis": _scatter_along_axis,
    "scatter_nd": _scatter_nd,
    # creation and misc
    "range_1d": _range_1d,
    "fill": _fill,
    "fill_like": _fill_like,
    "shape": _shape,
    "band_part": _band_part,
    "cumsum": _cumsum,
    "topk": _topk,
    "argsort": _argsort,
    "one_hot": _one_hot,
    "non_zero": _non_zero,
    # quantization and compressed weights
    "quantize": _quantize,
    "dequantize": _dequantize,
    **{name: _constexpr for name in (
        "constexpr_affine_dequantize", "constexpr_cast", "constexpr_lut_to_dense", "constexpr_sparse_to_dense",
        "constexpr_blockwise_shift_scale", "constexpr_lut_to_sparse", "constexpr_sparse_blockwise_shift_scale")},
    # resizing
    "upsample_nearest_neighbor": _upsample_nearest_neighbor,
    "resize_nearest_neighbor": _resize_nearest_neighbor,
    "upsample_bilinear": _upsample_bilinear,
    "resize_bilinear": _resize_bilinear,
    "resize": _resize,
}
