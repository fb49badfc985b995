"""Tiny models built in code for the tests (fast to export and compile)."""
import torch
from torch import nn


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.head = nn.Linear(8, 4)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

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
