"""Models of a chosen size for the benchmarks, built in code with seeded weights (nothing is downloaded):

- `transformer_pt2(path, layers)`: the transformer-mini encoder block stacked `layers` deep, as a .pt2;
- `cnn_pt2(path, depth)`: conv → BatchNorm → ReLU blocks with a residual add every other block, as a .pt2;
- `lstm_pt2(path, layers, steps)`: a stacked LSTM over `steps` frames and a linear head, as a .pt2 (the
  ExportedProgram path unrolls it step by step, so its graph grows with layers × steps);
- `flat_transformer_onnx(path, layers)`: a transformer written straight as ONNX nodes — MatMul, Add,
  LayerNormalization, Softmax, Sigmoid·x — with no module paths, 19 nodes per layer (1,053 layers ≈ 20,000
  nodes), the shape of graph Netron is measured on.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _save_pt2(module, args, path: str) -> str:
    import torch
    module.eval()
    torch.export.save(torch.export.export(module, args), path)
    return path


def transformer_pt2(path: str, layers: int, d: int = 32, heads: int = 4, seq: int = 16) -> str:
    import torch
    from torch import nn

    from xc_core.sources.samples import EncoderBlock

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.embedding = nn.Embedding(100, d)
            self.blocks = nn.Sequential(*[EncoderBlock(d, heads) for _ in range(layers)])
            self.head = nn.Linear(d, 100)

        def forward(self, tokens):
            return self.head(self.blocks(self.embedding(tokens)))
    return _save_pt2(Stack(), (torch.randint(0, 100, (1, seq)),), path)


def cnn_pt2(path: str, depth: int, ch: int = 16, size: int = 32) -> str:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, residual: bool):
            super().__init__()
            self.conv, self.bn, self.residual = nn.Conv2d(ch, ch, 3, padding=1), nn.BatchNorm2d(ch), residual

        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            return x + y if self.residual else y

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.stem = nn.Conv2d(3, ch, 3, padding=1)
            self.blocks = nn.Sequential(*[Block(i % 2 == 1) for i in range(depth)])
            self.head = nn.Linear(ch, 10)

        def forward(self, image):
            return self.head(self.blocks(self.stem(image)).mean((2, 3)))
    return _save_pt2(Net(), (torch.randn(1, 3, size, size),), path)


def lstm_pt2(path: str, layers: int = 3, steps: int = 160, features: int = 8, hidden: int = 16) -> str:
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lstm = nn.LSTM(features, hidden, num_layers=layers, batch_first=True)
            self.head = nn.Linear(hidden, 3)

        def forward(self, frames):
            y, _ = self.lstm(frames)
            return self.head(y[:, -1])
    return _save_pt2(Net(), (torch.randn(1, steps, features),), path)


NODES_PER_FLAT_LAYER = 19


def flat_transformer_onnx(path: str, layers: int, d: int = 32, seq: int = 16) -> str:
    """`layers` × 19 nodes: LayerNorm, Q/K MatMul+Add, V MatMul, Kᵀ Transpose, QKᵀ MatMul, Softmax, ·V MatMul,
    out MatMul+Add, residual Add, LayerNorm, MLP MatMul, SiLU (Sigmoid·x), MatMul, residual Add."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def weight(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float32), name))
        return name

    def node(op, ins, **attrs):
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op, ins, [out], name=f"{op}_{len(nodes)}", **attrs))
        return out
    x = "x"
    for i in range(layers):
        h = node("LayerNormalization", [x, weight(f"ln1s{i}", d), weight(f"ln1b{i}", d)], axis=-1)
        q = node("Add", [node("MatMul", [h, weight(f"wq{i}", d, d)]), weight(f"bq{i}", d)])
        k = node("Add", [node("MatMul", [h, weight(f"wk{i}", d, d)]), weight(f"bk{i}", d)])
        v = node("MatMul", [h, weight(f"wv{i}", d, d)])
        att = node("Softmax", [node("MatMul", [q, node("Transpose", [k], perm=[0, 2, 1])])], axis=-1)
        o = node("Add", [node("MatMul", [node("MatMul", [att, v]), weight(f"wo{i}", d, d)]), weight(f"bo{i}", d)])
        x = node("Add", [x, o])
        h = node("LayerNormalization", [x, weight(f"ln2s{i}", d), weight(f"ln2b{i}", d)], axis=-1)
        m = node("MatMul", [h, weight(f"w1{i}", d, d)])
        x = node("Add", [x, node("MatMul", [node("Mul", [m, node("Sigmoid", [m])]), weight(f"w2{i}", d, d)])])
    graph = helper.make_graph(nodes, "flat_transformer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, d])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


# Each takes (path, size): the size is layers, depth, steps (the LSTM keeps its 3 layers) or flat layers.
BUILDERS = {"transformer": transformer_pt2, "cnn": cnn_pt2,
            "lstm": lambda path, steps: lstm_pt2(path, steps=steps), "flat": flat_transformer_onnx}
