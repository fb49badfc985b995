"""Models shaped like the ones users bring (tiny weights, built in code): dynamic dims that must fit, integer token
ids, a scalar that picks a branch, several inputs and outputs, an ai.onnx.ml ZipMap classifier, TF-style tensor
names, an LSTM. Each builder writes an .onnx (or .pt2) file and returns its path."""
from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn


class TinyDetector(nn.Module):
    """A YOLO-like neck: the deepest features upsampled and concatenated with the ones before, so H and W must be
    multiples of 2**stages (32 with 5 stages: 16 fails at the Concat; 64 with 6: 224 fails, 256 runs)."""

    def __init__(self, stages: int = 5):
        super().__init__()
        torch.manual_seed(0)
        ch = [3, 8, 8] + [16] * (stages - 1)
        self.stages = nn.ModuleList(nn.Sequential(nn.Conv2d(ch[i], ch[i + 1], 3, stride=2, padding=1),
                                                  nn.BatchNorm2d(ch[i + 1]), nn.SiLU()) for i in range(stages))
        self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
        self.head = nn.Conv2d(32, 6, 1)

    def forward(self, images):
        feats = []
        x = images
        for s in self.stages:
            x = s(x)
            feats.append(x)
        p4, p5 = feats[-2], feats[-1]
        return self.head(torch.cat([self.up(p5), p4], dim=1))


def detector_onnx(path: str, stages: int = 5) -> str:
    model = TinyDetector(stages).eval()
    x = torch.randn(1, 3, 2 ** stages * 2, 2 ** stages * 2)
    torch.onnx.export(model, (x,), path, dynamo=False, input_names=["images"], output_names=["preds"],
                      dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}}, opset_version=17)
    return path


class TinyTextEncoder(nn.Module):
    """Token ids into a 1000-row embedding (ids outside [0, 1000) fail at the Gather), self-attention over a
    dynamic sequence."""

    def __init__(self, vocab: int = 1000):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, 32)
        self.norm = nn.LayerNorm(32)
        self.qkv = nn.Linear(32, 96)
        self.out = nn.Linear(32, 8)

    def forward(self, input_ids):
        h = self.norm(self.embed(input_ids))
        b, t = input_ids.shape
        q, k, v = self.qkv(h).reshape(b, t, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
        return self.out(a.transpose(1, 2).reshape(b, t, 32) + h)


def text_onnx(path: str) -> str:
    model = TinyTextEncoder().eval()
    ids = torch.randint(0, 1000, (1, 12))
    torch.onnx.export(model, (ids,), path, dynamo=False, input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}}, opset_version=17)
    return path


def branch_onnx(path: str) -> str:
    """`rate` (a scalar int64) picks a branch: 16000 takes `then` (x * 2), anything else `else` (x - 1)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "time"])
    rate = helper.make_tensor_value_info("rate", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "time"])
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    k = numpy_helper.from_array(np.array(16000, np.int64), "k16000")
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [1, "time"])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [1, "time"])])
    nodes = [helper.make_node("Equal", ["rate", "k16000"], ["is16k"], name="is16k"),
             helper.make_node("If", ["is16k"], ["y"], name="pick", then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "branch", [x, rate], [y], [two, one, k])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


class TwoInThreeOut(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(6, 4)
        self.b = nn.Conv1d(2, 4, 3, padding=1)

    def forward(self, features, signal):
        h = self.a(features)
        s = self.b(signal).mean(-1)
        return h + s, torch.softmax(h, -1), s.abs().sum(-1, keepdim=True)


def two_in_three_out_onnx(path: str) -> str:
    torch.onnx.export(TwoInThreeOut().eval(), (torch.randn(2, 6), torch.randn(2, 2, 10)), path, dynamo=False,
                      input_names=["features", "signal"], output_names=["mixed", "probs", "energy"],
                      opset_version=17)
    return path


def zipmap_onnx(path: str) -> str:
    """A scikit-learn-style classifier: LinearClassifier → (label, probabilities) and ZipMap → [{class: p}]."""
    x = helper.make_tensor_value_info("float_input", TensorProto.FLOAT, [None, 4])
    label = helper.make_tensor_value_info("output_label", TensorProto.INT64, [None])
    probs = helper.make_value_info("output_probability", helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("LinearClassifier", ["float_input"], ["label", "probability_tensor"], domain="ai.onnx.ml",
                         name="LinearClassifier", classlabels_ints=[0, 1, 2],
                         coefficients=rng.standard_normal(12).astype(np.float32).tolist(),
                         intercepts=[0.1, -0.2, 0.05], multi_class=1, post_transform="SOFTMAX"),
        helper.make_node("Identity", ["label"], ["output_label"], name="label_id"),
        helper.make_node("ZipMap", ["probability_tensor"], ["output_probability"], domain="ai.onnx.ml",
                         name="ZipMap", classlabels_int64s=[0, 1, 2]),
    ]
    g = helper.make_graph(nodes, "classifier", [x], [label, probs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def tf_names_onnx(path: str) -> str:
    """Tensor and node names as tf2onnx writes them: `input:0`, `model/dense/MatMul:0`, `Identity:0`."""
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("input:0", TensorProto.FLOAT, ["unk__6", 8])
    y = helper.make_tensor_value_info("Identity:0", TensorProto.FLOAT, ["unk__7", 1, 4])
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "model/dense/MatMul/ReadVariableOp:0")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "model/dense/BiasAdd/ReadVariableOp:0")
    axes = numpy_helper.from_array(np.array([1], np.int64), "model/ExpandDims/dim:0")
    nodes = [helper.make_node("MatMul", ["input:0", "model/dense/MatMul/ReadVariableOp:0"],
                              ["model/dense/MatMul:0"], name="model/dense/MatMul"),
             helper.make_node("Add", ["model/dense/MatMul:0", "model/dense/BiasAdd/ReadVariableOp:0"],
                              ["model/dense/BiasAdd:0"], name="model/dense/BiasAdd"),
             helper.make_node("Relu", ["model/dense/BiasAdd:0"], ["model/dense/Relu:0"], name="model/dense/Relu"),
             helper.make_node("Unsqueeze", ["model/dense/Relu:0", "model/ExpandDims/dim:0"], ["Identity:0"],
                              name="model/ExpandDims")]
    g = helper.make_graph(nodes, "tf2onnx", [x], [y], [w, b, axes])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


class TinyLstm(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, frames):
        y, _ = self.lstm(frames)
        return self.head(y[:, -1])


def lstm_onnx(path: str) -> str:
    torch.onnx.export(TinyLstm().eval(), (torch.randn(1, 20, 8),), path, dynamo=False, input_names=["frames"],
                      output_names=["scores"], dynamic_axes={"frames": {0: "batch", 1: "time"}}, opset_version=17)
    return path


BUILDERS = {"detector": detector_onnx, "text": text_onnx, "branch": branch_onnx,
            "two-in-three-out": two_in_three_out_onnx, "zipmap": zipmap_onnx, "tf-names": tf_names_onnx,
            "lstm": lstm_onnx}
