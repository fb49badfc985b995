"""The torch modules behind xc's onnx2torch converters (converters.py), each written from the op's definition.

They run under a real-valued trace (program.py): reading a constant input's values (pads, a zero point's type)
is fine, as it is for onnx2torch's own modules.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .refusals import Unsupported  # noqa: F401 — raised by the modules below, caught by route.py


class GlobalMaxPool(nn.Module):
    def forward(self, x):
        return torch.amax(x, dim=tuple(range(2, x.dim())), keepdim=True)


class BatchNorm(nn.Module):
    """Inference batch normalization over axis 1, at any rank."""

    def __init__(self, epsilon: float):
        super().__init__()
        self.epsilon = epsilon

    def forward(self, x, scale, bias, mean, var):
        return F.batch_norm(x, mean, var, scale, bias, False, 0.0, self.epsilon)


class Pad(nn.Module):
    """ONNX Pad in every mode on any rank (pads = [x1_begin, x2_begin, …, x1_end, x2_end, …] over `axes`, all axes
    by default; a negative pad crops): constant as one F.pad over every axis, with the constant_value input or
    Pad-2's `value`; reflect, edge and wrap one axis at a time (torch's own reflect padding takes 1 to 3 trailing
    dims, onnx2torch's constant padding passed the value as a tensor F.pad refuses, and read Pad-2's value under
    another name)."""

    def __init__(self, mode: str, pads=None, value: float = 0.0):
        super().__init__()
        if mode not in ("constant", "reflect", "edge", "wrap"):
            raise Unsupported(f"Pad in {mode} mode")
        self.mode, self.pads, self.value = mode, list(pads) if pads else None, value

    def forward(self, x, pads=None, constant_value=None, axes=None):
        values = self.pads if pads is None else [int(v) for v in pads.reshape(-1).tolist()]
        rank = x.dim()
        order = list(range(rank)) if axes is None else [int(a) % rank for a in axes.reshape(-1).tolist()]
        half = len(values) // 2
        if self.mode == "constant":
            begin, end = [0] * rank, [0] * rank
            for axis, b, e in zip(order, values[:half], values[half:]):
                begin[axis], end[axis] = b, e
            fill = self.value if constant_value is None or not constant_value.numel() else \
                constant_value.reshape(-1)[0].item()
            return F.pad(x, _torch_pads(begin, end), value=fill)
        for axis, begin, end in zip(order, values[:half], values[half:]):
            x = self._pad_axis(x, axis, begin, end)
        return x

    def _pad_axis(self, x, axis: int, begin: int, end: int):
        if begin < 0:
            x, begin = x.narrow(axis, -begin, x.shape[axis] + begin), 0
        if end < 0:
            x, end = x.narrow(axis, 0, x.shape[axis] + end), 0
        if not begin and not end:
            return x
        n = x.shape[axis]
        if self.mode == "reflect":      # the mirror image without the edge element: [3 2 | 1 2 3 4 | 3 2]
            parts = [x.narrow(axis, 1, begin).flip(axis), x, x.narrow(axis, n - 1 - end, end).flip(axis)]
        elif self.mode == "wrap":       # the other end continued: [3 4 | 1 2 3 4 | 1 2]
            parts = [x.narrow(axis, n - begin, begin), x, x.narrow(axis, 0, end)]
        else:                            # edge: the edge element repeated
            parts = [x.narrow(axis, 0, 1).repeat_interleave(begin, dim=axis), x,
                     x.narrow(axis, n - 1, 1).repeat_interleave(end, dim=axis)]
        return torch.cat([p for p in parts if p.shape[axis]], dim=axis)


class Unsqueeze(nn.Module):
    """ONNX Unsqueeze: negative axes count from the end of the output, and the axes (attribute or input, a scalar
    too) are inserted in increasing order of their place in the output."""

    def __init__(self, axes=None):
        super().__init__()
        self.axes = axes

    def forward(self, x, axes=None):
        given = self.axes if axes is None else axes.reshape(-1).tolist()
        rank = x.dim() + len(given)
        for axis in sorted(int(a) % rank for a in given):
            x = torch.unsqueeze(x, axis)
        return x


class LSTM(nn.Module):
    """ONNX LSTM (gates in the order i, o, f, c; optional bias, initial state and peepholes; forward, reverse or
    bidirectional; layout 0 or 1), the cell unrolled over the sequence. With `quantized`, com.microsoft's
    DynamicQuantizeLSTM: int8 weights laid out [directions, input, 4·hidden] with scales and zero points,
    dequantized to float first."""

    def __init__(self, hidden: int, direction: str, layout: int, clip: float | None, input_forget: int,
                 outputs: int, quantized: bool = False):
        super().__init__()
        self.hidden, self.direction, self.layout, self.clip = hidden, direction, layout, clip
        self.input_forget, self.outputs, self.quantized = input_forget, outputs, quantized

    @classmethod
    def from_attributes(cls, attrs: dict, outputs: int, quantized: bool = False) -> "LSTM":
        acts = [a.lower() for a in attrs.get("activations", [])]
        if acts and acts not in (["sigmoid", "tanh", "tanh"], ["sigmoid", "tanh", "tanh"] * 2):
            raise Unsupported(f"LSTM with activations {acts} (xc converts the default sigmoid, tanh, tanh)")
        return cls(int(attrs["hidden_size"]), attrs.get("direction", "forward"), int(attrs.get("layout", 0)),
                   attrs.get("clip"), int(attrs.get("input_forget", 0)), outputs, quantized)

    def forward(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None,
                w_scale=None, w_zero_point=None, r_scale=None, r_zero_point=None):
        if self.quantized:
            w = _dequantize_weight(w, w_scale, w_zero_point)
            r = _dequantize_weight(r, r_scale, r_zero_point)
        if self.layout:
            x = x.transpose(0, 1)
            initial_h = initial_h.transpose(0, 1) if initial_h is not None else None
            initial_c = initial_c.transpose(0, 1) if initial_c is not None else None
        seq, batch, hid = x.shape[0], x.shape[1], self.hidden
        if sequence_lens is not None and bool((sequence_lens != seq).any()):
            raise Unsupported("LSTM with sequence_lens shorter than the sequence")
        reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[self.direction]
        ys, hs, cs = [], [], []
        for d, backwards in enumerate(reverse):
            h = initial_h[d] if initial_h is not None else x.new_zeros(batch, hid)
            c = initial_c[d] if initial_c is not None else x.new_zeros(batch, hid)
            projected = torch.matmul(x, w[d].t())             # all time steps' input projections at once
            if b is not None:
                projected = projected + b[d, :4 * hid] + b[d, 4 * hid:]
            out = [None] * seq
            for t in (range(seq - 1, -1, -1) if backwards else range(seq)):
                gates = projected[t] + torch.matmul(h, r[d].t())
                if self.clip:
                    gates = gates.clamp(-self.clip, self.clip)
                i, o, f, g = gates.split(hid, dim=-1)
                if p is not None:
                    i, f = i + p[d, :hid] * c, f + p[d, 2 * hid:] * c
                i, g = torch.sigmoid(i), torch.tanh(g)
                f = 1 - i if self.input_forget else torch.sigmoid(f)
                c = f * c + i * g
                if p is not None:
                    o = o + p[d, hid:2 * hid] * c
                h = torch.sigmoid(o) * torch.tanh(c)
                out[t] = h
            ys.append(torch.stack(out))
            hs.append(h)
            cs.append(c)
        y, y_h, y_c = torch.stack(ys, 1), torch.stack(hs), torch.stack(cs)     # [seq, dirs, batch, hidden]
        if self.layout:
            y, y_h, y_c = y.permute(2, 0, 1, 3), y_h.transpose(0, 1), y_c.transpose(0, 1)
        result = (y, y_h, y_c)[:self.outputs]
        return result[0] if self.outputs == 1 else result


def _dequantize_weight(q, scale, zero_point):
    """DynamicQuantizeLSTM's [directions, in, 4·hidden] integer weight → ONNX LSTM's float [directions, 4·hidden,
    in]; the scale and zero point per direction, or per direction and output column."""
    q = q.float()
    shape = (q.shape[0], 1, -1)
    zp = zero_point.float().reshape(shape) if zero_point is not None else 0.0
    return ((q - zp) * scale.float().reshape(shape)).transpose(1, 2)


def _per_axis(t, x, axis: int):
    """A per-tensor or per-axis scale / zero point shaped to broadcast against x along `axis`."""
    if t.dim() == 0 or t.numel() == 1:
        return t.reshape(())
    shape = [1] * x.dim()
    shape[axis % x.dim()] = -1
    return t.reshape(shape)


class DequantizeLinear(nn.Module):
    def __init__(self, axis: int):
        super().__init__()
        self.axis = axis

    def forward(self, x, scale, zero_point=None):
        zp = _per_axis(zero_point.float(), x, self.axis) if zero_point is not None else 0.0
        return (x.float() - zp) * _per_axis(scale.float(), x, self.axis)


class QuantizeLinear(nn.Module):
    """The quantized values, held in float (round half to even, saturated to the zero point's type)."""

    def __init__(self, axis: int, bounds: tuple[int, int]):
        super().__init__()
        self.axis, self.low, self.high = axis, float(bounds[0]), float(bounds[1])

    def forward(self, x, scale, zero_point=None):
        low, high = self.low, self.high
        if zero_point is not None and not zero_point.dtype.is_floating_point:
            # the zero point's own type when it comes in as an integer tensor (a graph input, whose type the
            # converter could not read from an initializer); one held in float keeps the converter's range
            low, high = float(torch.iinfo(zero_point.dtype).min), float(torch.iinfo(zero_point.dtype).max)
        zp = _per_axis(zero_point.float(), x, self.axis) if zero_point is not None else 0.0
        return torch.clamp(torch.round(x / _per_axis(scale.float(), x, self.axis)) + zp, low, high)


class DynamicQuantizeLinear(nn.Module):
    """uint8 quantization with the scale and zero point computed from x's range (which always includes 0)."""

    def forward(self, x):
        low = torch.clamp(x.min(), max=0.0)
        high = torch.clamp(x.max(), min=0.0)
        scale = (high - low) / 255.0
        zero_point = torch.clamp(torch.round(-low / scale), 0.0, 255.0)
        return torch.clamp(torch.round(x / scale) + zero_point, 0.0, 255.0), scale, zero_point


class ConvInteger(nn.Module):
    def __init__(self, strides, pads, dilations, group: int):
        super().__init__()
        self.strides, self.pads, self.dilations, self.group = strides, pads, dilations, group

    @classmethod
    def from_attributes(cls, attrs: dict) -> "ConvInteger":
        if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            raise Unsupported(f"ConvInteger with auto_pad={attrs['auto_pad']}")
        return cls(attrs.get("strides"), attrs.get("pads"), attrs.get("dilations"), int(attrs.get("group", 1)))

    def forward(self, x, w, x_zero_point=None, w_zero_point=None):
        x = x.float() - (x_zero_point.float() if x_zero_point is not None else 0.0)
        w = w.float() - (_per_axis(w_zero_point.float(), w, 0) if w_zero_point is not None else 0.0)
        spatial = x.dim() - 2
        pads = list(self.pads or [0] * 2 * spatial)
        begin, end = pads[:spatial], pads[spatial:]
        if begin != end:
            x = F.pad(x, [v for pair in zip(reversed(begin), reversed(end)) for v in pair])
            begin = [0] * spatial
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
        return conv(x, w, None, self.strides or 1, begin, self.dilations or 1, self.group)


class MatMulInteger(nn.Module):
    def forward(self, a, b, a_zero_point=None, b_zero_point=None):
        a = a.float() - (a_zero_point.float() if a_zero_point is not None else 0.0)
        b = b.float() - (b_zero_point.float() if b_zero_point is not None else 0.0)
        return torch.matmul(a, b)


_POST = {"NONE": lambda s: s, "SOFTMAX": lambda s: torch.softmax(s, dim=-1), "LOGISTIC": torch.sigmoid}


def _post_transform(name: str):
    if name not in _POST:
        raise Unsupported(f"post_transform {name} (xc converts NONE, SOFTMAX and LOGISTIC)")
    return _POST[name]


class LinearClassifier(nn.Module):
    """scores = post_transform(X·coefficientsᵀ + intercepts); label = the class of the highest score. The
    coefficients are read as ONNX Runtime reads them: [classes, the input's feature count], row-major."""

    def __init__(self, attrs: dict, outputs: int):
        super().__init__()
        if "classlabels_strings" in attrs:
            raise Unsupported("LinearClassifier with string labels (a torch program returns tensors of "
                                      "numbers)")
        self.labels = list(attrs.get("classlabels_ints") or [])
        self.coefficients = list(attrs["coefficients"])
        self.intercepts = list(attrs.get("intercepts") or [])
        if len(self.intercepts) not in (0, len(self.labels)) or len(self.labels) < 3 and len(self.intercepts) == 1:
            raise Unsupported("a binary LinearClassifier with one row of coefficients")
        self.post = _post_transform(attrs.get("post_transform", "NONE"))
        self.outputs = outputs

    def forward(self, x):
        classes, features = len(self.labels), x.shape[-1]
        coef = torch.tensor(self.coefficients[:classes * features], dtype=torch.float32).reshape(classes, features)
        scores = torch.matmul(x.float(), coef.t())
        if self.intercepts:
            scores = scores + torch.tensor(self.intercepts, dtype=torch.float32)
        label = torch.tensor(self.labels, dtype=torch.int64)[torch.argmax(scores, dim=-1)]
        scores = self.post(scores)
        return (label, scores) if self.outputs > 1 else label


class LinearRegressor(nn.Module):
    def __init__(self, attrs: dict):
        super().__init__()
        self.coefficients, self.intercepts = list(attrs["coefficients"]), list(attrs.get("intercepts") or [])
        self.targets = int(attrs.get("targets", 1))
        self.post = _post_transform(attrs.get("post_transform", "NONE"))

    def forward(self, x):
        coef = torch.tensor(self.coefficients, dtype=torch.float32).reshape(self.targets, -1)
        y = torch.matmul(x.float(), coef.t())
        if self.intercepts:
            y = y + torch.tensor(self.intercepts, dtype=torch.float32)
        return self.post(y)


class Normalizer(nn.Module):
    def __init__(self, norm: str):
        super().__init__()
        if norm not in ("MAX", "L1", "L2"):
            raise Unsupported(f"Normalizer norm={norm}")
        self.norm = norm

    def forward(self, x):
        x = x.float()
        if self.norm == "MAX":
            return x / x.amax(dim=-1, keepdim=True)
        if self.norm == "L1":
            return x / x.abs().sum(dim=-1, keepdim=True)
        return x / torch.sqrt((x * x).sum(dim=-1, keepdim=True))


class Scaler(nn.Module):
    def __init__(self, attrs: dict):
        super().__init__()
        self.offset, self.scale = list(attrs.get("offset") or [0.0]), list(attrs.get("scale") or [1.0])

    def forward(self, x):
        return (x.float() - torch.tensor(self.offset)) * torch.tensor(self.scale)


class ZipMap(nn.Module):
    """The class probabilities as the tensor they are (ONNX Runtime returns them as a sequence of maps)."""

    def forward(self, x):
        return x


# ---- ops onnx2torch computes otherwise than the ONNX spec (found by bench/onnx_conformance.py) ----------------
class DtypeOf(nn.Module):
    """`inner`'s result in the type of its input `like`: ONNX keeps the input's type where PyTorch promotes
    (cumsum of int32 gives int64, arange of int32 bounds gives int64)."""

    def __init__(self, inner: nn.Module, like: int):
        super().__init__()
        self.inner, self.like = inner, like

    def forward(self, *args):
        return self.inner(*args).to(args[self.like].dtype)


class IsInf(nn.Module):
    """onnx2torch's IsInf ignores detect_positive / detect_negative."""

    def __init__(self, detect_positive: int = 1, detect_negative: int = 1):
        super().__init__()
        self.positive, self.negative = bool(detect_positive), bool(detect_negative)

    def forward(self, x):
        if self.positive and self.negative:
            return torch.isinf(x)
        if self.positive:
            return torch.isposinf(x)
        if self.negative:
            return torch.isneginf(x)
        return torch.zeros_like(x, dtype=torch.bool)


class NonZero(nn.Module):
    """ONNX NonZero gives [rank, count] (one row per axis); torch.nonzero gives [count, rank]."""

    def forward(self, x):
        return torch.nonzero(x).t()


class Flatten(nn.Module):
    """Any axis from -rank to rank (onnx2torch fails on 0 and on -rank)."""

    def __init__(self, axis: int):
        super().__init__()
        self.axis = axis

    def forward(self, x):
        axis = self.axis + x.dim() if self.axis < 0 else self.axis
        outer = inner = 1
        for d in x.shape[:axis]:
            outer *= d
        for d in x.shape[axis:]:
            inner *= d
        return x.reshape(outer, inner)


class LayerNormalization(nn.Module):
    """ONNX LayerNormalization over the axes from `axis` on (any axis; onnx2torch fails on the leading ones): Y,
    and the optional Mean and InvStdDev outputs (their normalized axes kept as 1s), in float32 when stash_type is
    1. One F.layer_norm when only Y is wanted and the scale covers the normalized shape."""

    def __init__(self, axis: int, epsilon: float, stash_type: int, outputs: int):
        super().__init__()
        self.axis, self.epsilon, self.stash, self.outputs = axis, epsilon, stash_type, outputs

    def forward(self, x, scale, bias=None):
        axis = self.axis % x.dim()
        shape = tuple(x.shape[axis:])
        if self.outputs == 1 and tuple(scale.shape) == shape and (bias is None or tuple(bias.shape) == shape) \
                and (self.stash != 1 or x.dtype == torch.float32):
            return F.layer_norm(x, shape, scale, bias, self.epsilon)
        held = x.float() if self.stash == 1 else x
        dims = tuple(range(axis, x.dim()))
        mean = held.mean(dim=dims, keepdim=True)
        var = ((held - mean) ** 2).mean(dim=dims, keepdim=True)
        inv = torch.rsqrt(var + self.epsilon)
        y = ((held - mean) * inv).to(x.dtype) * scale
        if bias is not None:
            y = y + bias
        result = (y, mean, inv)[:self.outputs]
        return result[0] if self.outputs == 1 else result


class GatherElements(nn.Module):
    """torch.gather, with ONNX's negative indices (counted from the axis' end)."""

    def __init__(self, axis: int):
        super().__init__()
        self.axis = axis

    def forward(self, x, indices):
        size = x.shape[self.axis]
        return torch.gather(x, self.axis, torch.where(indices < 0, indices + size, indices))


class TopK(nn.Module):
    """ONNX TopK: of equal values the one with the lower index comes first (torch.topk leaves ties in any order),
    so when the indices are read the values are sorted stably; when only the values are, torch.topk (the same
    values). K from the input (opset 10+) or the attribute (opset 1)."""

    def __init__(self, axis: int, largest: int, sorted_: int, indices_read: bool, k: int | None = None):
        super().__init__()
        self.axis, self.largest, self.sorted, self.indices_read, self.k = axis, bool(largest), bool(sorted_), \
            indices_read, k

    def forward(self, x, k=None):
        count = self.k if k is None else int(k.reshape(-1)[0])
        if not self.indices_read:
            values, indices = torch.topk(x, count, dim=self.axis, largest=self.largest, sorted=True)
            return values, indices
        values, indices = torch.sort(x, dim=self.axis, descending=self.largest, stable=True)
        return values.narrow(self.axis, 0, count), indices.narrow(self.axis, 0, count)


class Pow(nn.Module):
    """ONNX Pow's result has the base's type (an int64 base to a float exponent stays int64); torch promotes."""

    def forward(self, x, y):
        out = torch.pow(x, y)
        return out if out.dtype == x.dtype else out.to(x.dtype)


class Selu(nn.Module):
    """Any alpha and gamma (onnx2torch takes only the defaults)."""

    def __init__(self, alpha: float, gamma: float):
        super().__init__()
        self.alpha, self.gamma = alpha, gamma

    def forward(self, x):
        return self.gamma * torch.where(x > 0, x, self.alpha * (torch.exp(x) - 1))


class Shape(nn.Module):
    """ONNX Shape with start / end (clamped to the rank, an empty slice when start passes end)."""

    def __init__(self, start: int, end: int | None):
        super().__init__()
        self.start, self.end = start, end

    def forward(self, x):
        return torch.tensor(list(x.shape[self.start:self.end]), dtype=torch.int64)


def _same_pads(auto_pad: str, sizes, kernels, strides, dilations) -> list[int]:
    """[begin…, end…] pads of SAME_UPPER / SAME_LOWER: output = ceil(input / stride), the extra on the end (UPPER)
    or the beginning (LOWER)."""
    begin, end = [], []
    for n, k, s, d in zip(sizes, kernels, strides, dilations):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small = total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else total - small)
        end.append(total - small if auto_pad == "SAME_UPPER" else small)
    return begin + end


def _torch_pads(begin, end) -> list[int]:
    """ONNX [begin…, end…] per axis as F.pad's (last axis first) pairs."""
    return [v for pair in zip(reversed(list(begin)), reversed(list(end))) for v in pair]


class Conv(nn.Module):
    """ONNX Conv with the weight (and bias) as inputs of the module, not constants of it: for a weight the graph
    computes or takes as an input (onnx2torch reads weights only from initializers)."""

    def __init__(self, attrs: dict):
        super().__init__()
        self.auto_pad = attrs.get("auto_pad", "NOTSET")
        self.strides, self.dilations = attrs.get("strides"), attrs.get("dilations")
        self.pads, self.group = attrs.get("pads"), int(attrs.get("group", 1))

    def forward(self, x, w, b=None):
        spatial = x.dim() - 2
        if spatial not in (1, 2, 3):
            raise Unsupported(f"Conv over {spatial} spatial axes (PyTorch convolves 1 to 3)")
        strides = list(self.strides or [1] * spatial)
        dilations = list(self.dilations or [1] * spatial)
        if self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            pads = _same_pads(self.auto_pad, x.shape[2:], w.shape[2:], strides, dilations)
        elif self.auto_pad == "VALID":
            pads = [0] * 2 * spatial
        else:
            pads = list(self.pads or [0] * 2 * spatial)
        begin, end = pads[:spatial], pads[spatial:]
        if begin != end:
            x = F.pad(x, _torch_pads(begin, end))
            begin = [0] * spatial
        conv = (F.conv1d, F.conv2d, F.conv3d)[spatial - 1]
        return conv(x, w, b, strides, begin, dilations, self.group)


class ConvTranspose(nn.Module):
    """ONNX ConvTranspose in full: weights as module inputs, output_shape, SAME auto_pad, asymmetric and negative
    pads (onnx2torch ignores output_shape and takes symmetric pads and constant weights only). The full
    transposed convolution, then the pads cropped and output_padding added at the end of each axis, as the spec's
    output-size formula reads."""

    def __init__(self, attrs: dict):
        super().__init__()
        self.auto_pad = attrs.get("auto_pad", "NOTSET")
        self.strides, self.dilations, self.group = attrs.get("strides"), attrs.get("dilations"), \
            int(attrs.get("group", 1))
        self.pads, self.output_padding = attrs.get("pads"), attrs.get("output_padding")
        self.output_shape = attrs.get("output_shape")

    def forward(self, x, w, b=None):
        spatial = x.dim() - 2
        if spatial not in (1, 2, 3):
            raise Unsupported(f"ConvTranspose over {spatial} spatial axes (PyTorch convolves 1 to 3)")
        strides = list(self.strides or [1] * spatial)
        dilations = list(self.dilations or [1] * spatial)
        extra = list(self.output_padding or [0] * spatial)
        sizes, kernels = list(x.shape[2:]), list(w.shape[2:])
        full = [s * (n - 1) + (k - 1) * d + 1 + e for n, k, s, d, e in zip(sizes, kernels, strides, dilations, extra)]
        wanted = list(self.output_shape)[-spatial:] if self.output_shape else None
        if wanted is None and self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            wanted = [n * s for n, s in zip(sizes, strides)]
        if wanted is not None:
            totals = [f - o for f, o in zip(full, wanted)]
            upper = self.auto_pad == "SAME_UPPER"
            begin = [t // 2 if upper else t - t // 2 for t in totals]
            end = [t - t // 2 if upper else t // 2 for t in totals]
        elif self.auto_pad == "VALID":
            begin = end = [0] * spatial
        else:
            pads = list(self.pads or [0] * 2 * spatial)
            begin, end = pads[:spatial], pads[spatial:]
        conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[spatial - 1]
        y = conv(x, w, None, strides, 0, 0, self.group, dilations)
        # output_padding: zeros (bias only) added at each axis' end; the pads cropped (a negative pad adds zeros)
        y = F.pad(y, _torch_pads([-p for p in begin], [e - p for e, p in zip(extra, end)]))
        if b is not None:
            y = y + b.reshape([1, -1] + [1] * spatial)
        return y


class ScatterND(nn.Module):
    """ScatterND with reduction add, mul, max or min (onnx2torch computes `none` only): the indexed slices of a
    copy of the data combined with the updates, one index after another."""

    _REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}

    def __init__(self, reduction: str):
        super().__init__()
        if reduction not in self._REDUCE:
            raise Unsupported(f"ScatterND with reduction {reduction!r} (xc converts none, add, mul, max and min)")
        self.reduction = self._REDUCE[reduction]

    def forward(self, data, indices, updates):
        k = indices.shape[-1]
        lead = data.shape[:k]
        flat = data.reshape((-1,) + tuple(data.shape[k:]))
        index = torch.zeros(indices.shape[:-1], dtype=torch.int64)
        for axis in range(k):
            i = indices[..., axis].to(torch.int64)
            index = index * lead[axis] + torch.where(i < 0, i + lead[axis], i)
        rows = updates.reshape((-1,) + tuple(data.shape[k:]))
        out = flat.index_reduce(0, index.reshape(-1), rows, self.reduction, include_self=True) \
            if self.reduction != "sum" else flat.index_add(0, index.reshape(-1), rows)
        return out.reshape(data.shape)


class Constant(nn.Module):
    def __init__(self, value):
        super().__init__()
        self.register_buffer("value", value)

    def forward(self):
        return self.value


class Resize(nn.Module):
    """ONNX Resize exactly as the spec's reference implementation computes it (onnx.reference), on any axis.

    Resize is separable: along each resized axis every output element is a fixed combination of a few input
    elements (1 for nearest, 2 for linear, 4 for cubic), which the plan (resize_plan, below) gets from ONNX's
    own reference implementation run on the identity. When PyTorch's F.interpolate gives those very numbers (the
    plan checks on random data at the model's shapes), the program keeps it — one interpolation op, as compilers
    expect; otherwise the program gathers the input elements along each axis and sums them with their weights
    (`taps`: per axis, the element indices and weights, and a constant added where the output lies outside the
    input, tf_crop_and_resize's extrapolation_value). The plan comes from the model's constants, or from the values
    the module is traced with when scales or sizes are computed (then burned into the program, as every shape the
    real-valued trace reads)."""

    def __init__(self, attrs: dict, version: int, plan: dict | None):
        super().__init__()
        self.attrs, self.version, self.plan = attrs, version, plan

    def forward(self, x, roi=None, scales=None, sizes=None):
        plan = self.plan
        if plan is None:
            from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

            given = [roi] if self.version == 10 else [roi, scales, sizes]     # Resize-10: (X, scales)
            with disable_proxy_modes_tracing():     # working the plan out is no part of the program
                values = [None if v is None else v.detach().cpu().numpy() for v in given]
                plan = resize_plan(self.attrs, self.version, list(x.shape), *values)
        if plan["interpolate"] is not None:
            return F.interpolate(x, **plan["interpolate"])
        selects = all(w is None for _, _, weights, offset in plan["taps"] for w in weights) and \
            all(offset is None for *_, offset in plan["taps"])
        y = x if x.is_floating_point() or selects else x.float()     # nearest picks elements of any type
        for axis, indices, weights, offset in plan["taps"]:
            parts = None
            for index, weight in zip(indices, weights):
                picked = torch.index_select(y, axis, torch.tensor(index, dtype=torch.int64))
                if weight is not None:
                    shape = [1] * y.dim()
                    shape[axis] = -1
                    picked = picked * torch.tensor(weight, dtype=y.dtype).reshape(shape)
                parts = picked if parts is None else parts + picked
            if offset is not None:
                shape = [1] * y.dim()
                shape[axis] = -1
                parts = parts + torch.tensor(offset, dtype=y.dtype).reshape(shape)
            y = parts
        return y if y.dtype == x.dtype else y.to(x.dtype)


# ---- ops onnx2torch has no converter for, each a line or two of torch ------------------------------------------
class Elementwise(nn.Module):
    """One torch function of the inputs (Sinh, LessOrEqual, …)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class Trilu(nn.Module):
    """The upper (triu) or lower (tril) triangle of the last two axes, k diagonals off (k an input, default 0)."""

    def __init__(self, upper: int):
        super().__init__()
        self.upper = bool(upper)

    def forward(self, x, k=None):
        diagonal = int(k.reshape(-1)[0]) if k is not None else 0
        return torch.triu(x, diagonal) if self.upper else torch.tril(x, diagonal)


class Hardmax(nn.Module):
    """1 at the first largest value along `axis`, 0 elsewhere (opset 13; earlier versions flatten from `axis`)."""

    def __init__(self, axis: int, flattened: bool):
        super().__init__()
        self.axis, self.flattened = axis, flattened

    def forward(self, x):
        shape = x.shape
        axis = self.axis % x.dim()
        if self.flattened:
            outer = 1
            for d in shape[:axis]:
                outer *= d
            x, axis = x.reshape(outer, -1), 1
        hot = F.one_hot(torch.argmax(x, dim=axis), x.shape[axis]).to(x.dtype)
        return torch.movedim(hot, -1, axis).reshape(shape)


class Shrink(nn.Module):
    def __init__(self, bias: float, lambd: float):
        super().__init__()
        self.bias, self.lambd = bias, lambd

    def forward(self, x):
        zero = torch.zeros_like(x)
        return torch.where(x < -self.lambd, x + self.bias, torch.where(x > self.lambd, x - self.bias, zero))


# ---- Resize's plan: what Resize computes, from ONNX's reference implementation (converters.py asks for it when
# the sizes are known while converting; Resize asks for it at run time otherwise) ----
def resize_plan(attrs: dict, version: int, shape: list, *given) -> dict:
    """How modules.Resize computes Resize-`version` with `attrs` on an input of `shape` (given: [scales] for
    Resize-10, else [roi, scales, sizes], each None or an array): per resized axis the input elements and weights
    each output element takes, from ONNX's reference implementation run on the identity; and F.interpolate's
    arguments when PyTorch's own interpolation gives the same numbers."""
    import numpy as np

    roi, scales, sizes = (None, given[0], None) if version == 10 else (list(given) + [None] * 3)[:3]
    given_scales = scales is not None and np.size(scales) > 0
    if not given_scales and (sizes is None or not np.size(sizes)):
        raise Unsupported("Resize with neither scales nor sizes")
    rank = len(shape)
    roi = roi if roi is not None and np.size(roi) == 2 * rank else None
    taps, out_shape = [], []
    for axis in range(rank):
        matrix, offset = _resize_axis(version, attrs, shape[axis],
                                      float(scales[axis]) if given_scales else None,
                                      None if given_scales else int(sizes[axis]),
                                      None if roi is None else (float(roi[axis]), float(roi[rank + axis])))
        out_shape.append(matrix.shape[0])
        if matrix.shape[0] == matrix.shape[1] and np.array_equal(matrix, np.eye(matrix.shape[0])) \
                and not np.any(offset):
            continue
        taps.append(_taps(axis, matrix, offset))
    return {"taps": taps, "interpolate": _matching_interpolate(
        attrs, list(shape), out_shape, taps, [float(v) for v in scales] if given_scales else None)}


def _resize_axis(version: int, attrs: dict, size: int, scale, out, roi):
    """(matrix [out, in], offset [out]) of one axis of Resize: ONNX's reference implementation (onnx.reference) run
    on the identity (the matrix) and on zeros (the offset, tf_crop_and_resize's extrapolation_value)."""
    import numpy as np
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    kept = {k: v for k, v in attrs.items() if k != "axes"}
    if version == 10:
        inputs = ["x", "scales"]
        inits = [helper.make_tensor("scales", TensorProto.FLOAT, [2], [scale, 1.0])]
    else:
        inputs = ["x", "roi", "scales", "sizes"]
        roi_values = [roi[0], 0.0, roi[1], 1.0] if roi else []
        inits = [helper.make_tensor("roi", TensorProto.FLOAT, [len(roi_values)], roi_values)]
        if scale is not None:
            inits += [helper.make_tensor("scales", TensorProto.FLOAT, [2], [scale, 1.0])]
            inputs[3:] = []
        else:
            inputs[2] = ""
            inits += [helper.make_tensor("sizes", TensorProto.INT64, [2], [out, 0])]
    node = helper.make_node("Resize", inputs, ["y"], **kept)
    results = []
    for data in (np.eye(size), np.zeros((size, 1))):
        columns = data.shape[1]
        if scale is None:
            inits[-1] = helper.make_tensor("sizes", TensorProto.INT64, [2], [out, columns])
        graph = helper.make_graph([node], "resize_axis",
                                  [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [size, columns])],
                                  [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])
        results.append(np.asarray(ReferenceEvaluator(model).run(None, {"x": data})[0], dtype=np.float64))
    offset = results[1][:, 0]
    return results[0] - offset[:, None], offset


def _taps(axis: int, matrix, offset):
    """(axis, [index array per tap], [weight array per tap, None for a plain pick], offset or None) of a resize
    matrix whose rows each take a few input elements."""
    import numpy as np
    rows = [np.nonzero(r)[0] for r in matrix]
    count = max((len(r) for r in rows), default=0)
    indices = [[int(r[k]) if k < len(r) else 0 for r in rows] for k in range(count)]
    weights = [[float(matrix[i, r[k]]) if k < len(r) else 0.0 for i, r in enumerate(rows)] for k in range(count)]
    if count == 1 and all(w == 1.0 for w in weights[0]):
        weights = [None]
    return axis, indices, weights, [float(v) for v in offset] if np.any(offset) else None


def _matching_interpolate(attrs: dict, shape: list, out_shape: list, taps: list, scales):
    """F.interpolate's keyword arguments when they give the reference's numbers for this Resize (checked on
    random data of one batch item and channel), else None."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    spatial = len(shape) - 2
    if spatial not in (1, 2, 3) or not taps or any(t[0] < 2 for t in taps) or any(t[3] is not None for t in taps):
        return None
    mode = attrs.get("mode", "nearest")
    modes = {"nearest": ["nearest", "nearest-exact"], "linear": [("linear", "bilinear", "trilinear")[spatial - 1]],
             "cubic": ["bicubic"] if spatial == 2 else []}.get(mode, [])
    size = out_shape[2:]
    probe = torch.from_numpy(np.random.default_rng(0).standard_normal([1, 1] + shape[2:]).astype(np.float32))
    wanted = Resize(attrs, 0, {"taps": taps, "interpolate": None})(probe)
    for name in modes:
        corners = [None] if name.startswith("nearest") else [False, True]
        for align in corners:
            options = [{"size": size}]
            if scales is not None:
                options.append({"scale_factor": scales[2:], "recompute_scale_factor": False})
            for option in options:
                kwargs = {"mode": name, **option}
                if align is not None:
                    kwargs["align_corners"] = align
                try:
                    got = F.interpolate(probe, **kwargs)
                except (RuntimeError, ValueError):
                    continue
                # float32 coordinate arithmetic moves a weight by ~1e-7; a wrong mapping moves values by ~1
                if got.shape == wanted.shape and torch.allclose(got, wanted, rtol=1e-4, atol=1e-4):
                    return kwargs
    return None
