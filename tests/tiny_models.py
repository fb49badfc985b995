"""Tiny models built in code for the tests (fast to export and compile)."""
import torch
from torch import nn


def _trained_stats(bn: nn.BatchNorm2d) -> None:
    """Running statistics a trained norm would have (fresh ones are 0 / 1, which folds into nothing)."""
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.head = nn.Linear(8, 4)
        _trained_stats(self.bn)

    def forward(self, x):
        return self.head(self.act(self.bn(self.conv(x))).mean((2, 3)))


def conv_bn_relu():
    return ConvBnRelu().eval(), (torch.randn(1, 3, 16, 16),)


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(6, 5)
        self.b = nn.Linear(6, 3)

    def forward(self, x):
        return torch.tanh(self.a(x)), torch.sigmoid(self.b(x))


class ReviewNet(nn.Module):
    """A model change a reviewer would see in a pull request: v1 uses ReLU; v2 swaps it for HardSwish and adds a
    LayerNorm before the head (NNAPI has no LayerNormalization, and the norm runs in fp16 on the Neural Engine)."""

    def __init__(self, v2: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.Hardswish() if v2 else nn.ReLU()
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.norm = nn.LayerNorm(16) if v2 else nn.Identity()
        self.head = nn.Linear(16, 10)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.conv2(self.act(self.bn(self.conv(x)))).mean((2, 3))
        return self.head(self.norm(y))


def review_pair(folder: str) -> tuple[str, str]:
    """Both versions saved as .pt2 files, as a CI job would receive them."""
    import os
    paths = []
    for v2 in (False, True):
        path = os.path.join(folder, f"review_v{2 if v2 else 1}.pt2")
        torch.export.save(torch.export.export(ReviewNet(v2).eval(), (torch.randn(1, 3, 32, 32),)), path)
        paths.append(path)
    return paths[0], paths[1]


class ConvBnReluStack(nn.Module):
    """Two Conv+BatchNorm+ReLU blocks, each conv feeding only its norm: every compiler can fuse what it implements."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8, 4)
        for m in self.body:
            if isinstance(m, nn.BatchNorm2d):
                _trained_stats(m)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


class BlockedConvBn(ConvBnRelu):
    """ConvBnRelu whose conv output feeds its BatchNorm *and* a residual add, so no compiler may fold the norm in."""

    def forward(self, x):
        y = self.conv(x)
        return self.head((self.act(self.bn(y)) + y).mean((2, 3)))


class ConvMeanGeluCumsum(nn.Module):
    """Conv+BN+ReLU → mean → Linear → GELU → cumsum: ExecuTorch's XNNPACK declines mean.dim without keepdim and has
    no config for cumsum, Vulkan has no cumsum, Core ML takes it all; LiteRT makes the first three one CONV_2D between
    two TRANSPOSEs, and its XNNPACK has no CUMSUM kernel."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 16)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return torch.cumsum(nn.functional.gelu(self.fc(y)), 1)


def chain_onnx(path, nodes: int) -> str:
    """A flat chain of Add/Relu nodes: graphs of `nodes` ops with no module paths, as a big ONNX upload."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    one = numpy_helper.from_array(np.full((1, 8), 0.5, np.float32), "one")
    ops, prev = [], "x"
    for i in range(nodes):
        kind = "Add" if i % 2 == 0 else "Relu"
        ins = [prev, "one"] if kind == "Add" else [prev]
        ops.append(helper.make_node(kind, ins, [f"t{i}"], name=f"{kind.lower()}_{i}"))
        prev = f"t{i}"
    y = helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 8])
    m = helper.make_model(helper.make_graph(ops, "chain", [x], [y], [one]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return str(path)


class ExpOverflow(nn.Module):
    """exp of values near 20 passes float16's 65,504: an fp16 target's outputs go non-finite at the exp (culprit
    search's test case)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        e = torch.exp(h * 6.0)
        return self.b(e / e.sum(-1, keepdim=True) + h)
