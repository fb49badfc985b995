"""The torch modules behind xc's onnx2torch converters (converters.py), each written from the op's definition.

They run under a real-valued trace (program.py): reading a constant input's values (pads, a zero point's type)
is fine, as it is for onnx2torch's own modules.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn



class Unsupported(NotImplementedError):
    """A form of an op (an attribute value, string labels) xc's converter does not compute: a refusal, not
    unfinished work. The route says it in one line, with the node, and what the user can do instead."""


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
    """Pad in reflect or edge mode on any rank, one axis at a time (ONNX Pad: pads = [x1_begin, x2_begin, …,
    x1_end, x2_end, …] over `axes`, all axes by default; a negative pad crops)."""

    def __init__(self, mode: str, pads=None):
        super().__init__()
        self.mode, self.pads = mode, list(pads) if pads else None

    def forward(self, x, pads=None, constant_value=None, axes=None):
        values = self.pads if pads is None else [int(v) for v in pads.tolist()]
        rank = x.dim()
        order = list(range(rank)) if axes is None else [int(a) % rank for a in axes.tolist()]
        half = len(values) // 2
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
        else:                            # edge: the edge element repeated
            parts = [x.narrow(axis, 0, 1).repeat_interleave(begin, dim=axis), x,
                     x.narrow(axis, n - 1, 1).repeat_interleave(end, dim=axis)]
        return torch.cat([p for p in parts if p.shape[axis]], dim=axis)


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
        zp = _per_axis(zero_point.float(), x, self.axis) if zero_point is not None else 0.0
        return torch.clamp(torch.round(x / _per_axis(scale.float(), x, self.axis)) + zp, self.low, self.high)


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
