"""Model pairs for the model diff (issue 56), built in code with tiny weights.

The done-when pair: `base_model()` and `head_model()` differ by exactly three things —
  1. a fourth Block inserted at `blocks[1]` (the base's blocks.1 and blocks.2 become blocks.2 and blocks.3),
  2. the activation of the head's `blocks.3` (the base's blocks.2) switched from ReLU to Hardswish,
  3. `head.fc`'s weight multiplied by 1.1 (a retrained layer: relative L2 of the change exactly 0.1);
everything else is bit-identical (the head model takes the base's state dict, moved to the renumbered keys).

The unrelated pair: `mlp_model()` (a stack of Linear → LayerNorm → GELU layers) against `convnet_model()` (Conv →
BatchNorm → ReLU stages and a linear classifier): they share a Linear and nothing else worth the name.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

CHANNELS = 8
CLASSES = 5
INSERTED_AT = 1           # the head model's new block: blocks.1
SWITCHED_BLOCK = 3        # the head model's block whose activation is Hardswish (the base's blocks.2)
FC_SCALE = 1.1            # head.fc.weight in the head model = base's × this


class Block(nn.Module):
    """conv → act → conv with a residual: the repeated unit of Net."""

    def __init__(self, channels: int = CHANNELS, act: type[nn.Module] = nn.ReLU):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.act = act()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return x + self.conv2(self.act(self.conv1(x)))


class Net(nn.Module):
    """stem (conv + bn + relu), a Sequential of Blocks, head (pool + flatten + linear)."""

    def __init__(self, blocks: list[Block]):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, CHANNELS, 3, padding=1), nn.BatchNorm2d(CHANNELS), nn.ReLU())
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(OrderedDict(pool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten(),
                                              fc=nn.Linear(CHANNELS, CLASSES)))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def _with_running_stats(model: Net) -> Net:
    """Batch-norm statistics that are not the defaults (1 and 0), so they are real weights to compare."""
    with torch.no_grad():
        model.stem[1].running_mean.uniform_(-0.5, 0.5)
        model.stem[1].running_var.uniform_(0.5, 1.5)
    return model


def base_model() -> Net:
    torch.manual_seed(0)
    return _with_running_stats(Net([Block() for _ in range(3)])).eval()


def head_model() -> Net:
    """The base with one inserted block, one swapped activation and one retrained layer (module docstring)."""
    base = base_model()
    torch.manual_seed(1)     # the inserted block's own weights
    blocks = [Block() for _ in range(4)]
    blocks[SWITCHED_BLOCK] = Block(act=nn.Hardswish)
    head = Net(blocks).eval()
    state = {}
    for key, value in base.state_dict().items():
        parts = key.split(".")
        if parts[0] == "blocks" and int(parts[1]) >= INSERTED_AT:   # renumbered by the insertion
            parts[1] = str(int(parts[1]) + 1)
        state[".".join(parts)] = value.clone()
    for key, value in head.state_dict().items():                   # the inserted block keeps its own
        state.setdefault(key, value)
    state["head.fc.weight"] = state["head.fc.weight"] * FC_SCALE
    head.load_state_dict(state)
    return head


def renamed_model() -> nn.Module:
    """The base model with its `blocks` container renamed `layers` (same weights): a rename, not a change."""
    base = base_model()

    class RenamedNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = base.stem
            self.layers = base.blocks
            self.head = base.head

        def forward(self, x):
            return self.head(self.layers(self.stem(x)))

    return RenamedNet().eval()


def example_inputs() -> tuple[torch.Tensor]:
    torch.manual_seed(2)
    return (torch.randn(1, 3, 8, 8),)


class MLP(nn.Module):
    def __init__(self, width: int = 16, depth: int = 4):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU())
                                      for _ in range(depth)])
        self.out = nn.Linear(width, CLASSES)

    def forward(self, x):
        return self.out(self.layers(x))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(*[nn.Sequential(nn.Conv2d(c_in, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
                                        for c_in in (3, 8, 8)])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, CLASSES)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def mlp_model() -> MLP:
    torch.manual_seed(0)
    return MLP().eval()


def mlp_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(2, 16),)


def convnet_model() -> ConvNet:
    torch.manual_seed(0)
    return ConvNet().eval()


def convnet_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, 8, 8),)
