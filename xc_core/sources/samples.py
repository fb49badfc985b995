"""Bundled demo models, defined in code with seeded weights: nothing is downloaded.

Each sample declares its example inputs. Token ids are int64 within the vocabulary, so every target sees a valid
embedding lookup.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .spec import InputSpec


# --- vision-mini: a MobileNetV2-like classifier ------------------------------------------------------------
class SqueezeExcite(nn.Module):
    def __init__(self, ch: int, reduced: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(ch, reduced, 1)
        self.act = nn.ReLU()
        self.expand = nn.Conv2d(reduced, ch, 1)
        self.gate = nn.Hardsigmoid()

    def forward(self, x):
        return x * self.gate(self.expand(self.act(self.reduce(self.pool(x)))))


class InvertedResidual(nn.Module):
    """Expand 1x1 → depthwise 3x3 → (squeeze-excite) → project 1x1, residual when shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int, se: bool):
        super().__init__()
        hidden = cin * expand
        self.use_residual = stride == 1 and cin == cout
        self.expand = nn.Sequential(nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                                       nn.BatchNorm2d(hidden), nn.ReLU6())
        self.se = SqueezeExcite(hidden, max(4, hidden // 4)) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.project(self.se(self.depthwise(self.expand(x))))
        return x + y if self.use_residual else y


class VisionMini(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 1, 2, se=False),
            InvertedResidual(16, 24, 2, 3, se=True),
            InvertedResidual(24, 24, 1, 3, se=True),
        )
        self.head = nn.Sequential(nn.Conv2d(24, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU6())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, image):
        x = self.pool(self.head(self.blocks(self.stem(image))))
        return self.classifier(torch.flatten(x, 1))


# --- tts-mini: token ids → mel frames ----------------------------------------------------------------------
class ConvBlock1d(nn.Module):
    def __init__(self, ch: int, k: int = 5):
        super().__init__()
        self.conv = nn.Conv1d(ch, ch, k, padding=k // 2)
        self.norm = nn.BatchNorm1d(ch)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.norm(self.conv(x)))


class TtsMini(nn.Module):
    VOCAB = 64

    def __init__(self, d: int = 32, n_mels: int = 16):
        super().__init__()
        self.embedding = nn.Embedding(self.VOCAB, d)
        self.encoder_convs = nn.Sequential(ConvBlock1d(d), ConvBlock1d(d))
        self.encoder = nn.TransformerEncoderLayer(d, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.upsample = nn.ConvTranspose1d(d, d, kernel_size=4, stride=2, padding=1)
        self.mel = nn.Conv1d(d, n_mels, 1)
        self.postnet = nn.Sequential(nn.Conv1d(n_mels, d, 5, padding=2), nn.BatchNorm1d(d), nn.Tanh(),
                                     nn.Conv1d(d, n_mels, 5, padding=2))

    def forward(self, tokens):
        x = self.embedding(tokens).transpose(1, 2)          # (B, d, T)
        x = self.encoder_convs(x).transpose(1, 2)           # (B, T, d)
        x = self.encoder(x).transpose(1, 2)                 # (B, d, T)
        mel = self.mel(torch.relu(self.upsample(x)))        # (B, n_mels, 2T)
        return mel + self.postnet(mel)


# --- transformer-mini: two encoder blocks ------------------------------------------------------------------
class EncoderBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TransformerMini(nn.Module):
    VOCAB = 100

    def __init__(self, d: int = 32, heads: int = 4, seq: int = 16):
        super().__init__()
        self.embedding = nn.Embedding(self.VOCAB, d)
        self.position = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.blocks = nn.Sequential(EncoderBlock(d, heads), EncoderBlock(d, heads))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, self.VOCAB)

    def forward(self, tokens):
        x = self.embedding(tokens) + self.position
        return self.head(self.norm(self.blocks(x)))


@dataclass(frozen=True)
class Sample:
    name: str
    description: str
    build: Callable[[], nn.Module]
    inputs: tuple[InputSpec, ...]

    def model(self) -> nn.Module:
        # Seeded weights: the same sample gives the same numbers everywhere. Layers draw their initial weights from
        # torch's one global generator, so two threads building at once (the dashboard's warm-up and a first
        # visitor, both hashing the sample for its run key) would interleave their draws and get different weights:
        # one build at a time, on a forked generator that leaves the caller's random state as it was.
        with _BUILDING, torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            m = self.build()
            _randomize_norm_statistics(m)
        return m.eval()


_BUILDING = threading.Lock()


def _randomize_norm_statistics(model: nn.Module) -> None:
    """Fresh BatchNorm layers are identities; give them seeded non-trivial statistics so fusions matter."""
    g = torch.Generator().manual_seed(1)
    for mod in model.modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            n = mod.num_features
            mod.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            with torch.no_grad():
                mod.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                mod.bias.copy_(torch.randn(n, generator=g) * 0.1)


SAMPLES: dict[str, Sample] = {
    s.name: s for s in (
        Sample("vision-mini", "MobileNetV2-like: depthwise-separable convs, BatchNorm, ReLU6, squeeze-excite "
               "with hardsigmoid, residual adds, global pool, linear", VisionMini,
               (InputSpec("image", [1, 3, 64, 64], "float32"),)),
        Sample("tts-mini", "token ids → mel frames: embedding, conv1d stack, a transformer encoder layer, "
               "ConvTranspose1d upsampling, postnet", TtsMini,
               (InputSpec("tokens", [1, 24], "int64", low=0, high=TtsMini.VOCAB),)),
        Sample("transformer-mini", "two encoder blocks: multi-head attention, LayerNorm, GELU MLP",
               TransformerMini,
               (InputSpec("tokens", [1, 16], "int64", low=0, high=TransformerMini.VOCAB),)),
    )
}
DEFAULT_SAMPLE = "tts-mini"
