"""Bundled demo models, defined in code with seeded weights: nothing is downloaded.

digits-mini is the one sample trained on real data (scikit-learn's 8×8 digits, shipped inside its wheel), so it is
the one that carries a dataset for task accuracy: its held-out split (`bundled_dataset`). The others have random
weights and no task to be accurate at.

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


# --- digits-mini: a small CNN trained on scikit-learn's 8×8 digits -------------------------------------------
class DigitsMini(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),                                 # 8×8 → 4×4
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        )
        self.classifier = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, image):
        return self.classifier(torch.flatten(self.features(image), 1))


DIGITS_SPLIT_SEED = 0         # train_test_split's random_state: the held-out split is the same on every machine
DIGITS_HELD_OUT = 0.2
DIGITS_EPOCHS = 10
DIGITS_BATCH = 64
DIGITS_LR = 1e-2


def _digits_split():
    """(x_train, y_train, x_test, y_test, test_indices) of scikit-learn's digits: images scaled to [0, 1] as
    float32 (n, 1, 8, 8), a stratified 80/20 split. load_digits reads the data shipped in scikit-learn's wheel."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]      # pixel values are 0..16
    index = np.arange(len(images))
    x_tr, x_te, y_tr, y_te, _, i_te = train_test_split(
        images, digits.target, index, test_size=DIGITS_HELD_OUT, stratify=digits.target,
        random_state=DIGITS_SPLIT_SEED)
    return x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64), i_te


_TRAINED: dict[str, dict] = {}     # "digits-mini" -> its trained state_dict, once per process
_TRAINING = threading.Lock()


def _trained_digits() -> DigitsMini:
    """DigitsMini with the weights training gives. Training runs once per process (the build is called from several
    threads), deterministically: seeded here, one thread, deterministic algorithms, fixed epochs — so every process
    (the dashboard, each worker) gets the same weights and the same sha256."""
    with _TRAINING:
        if "digits-mini" not in _TRAINED:
            _TRAINED["digits-mini"] = _train_digits()
        model = DigitsMini()
        model.load_state_dict(_TRAINED["digits-mini"])
        return model


def _train_digits() -> dict:
    x_tr, y_tr, *_ = _digits_split()
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    # A second thread would change the order floating-point sums are taken in, and so the weights' last bits.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        # Gradients on, whatever the caller's context: the first build may come from inside a no_grad block.
        with torch.random.fork_rng(devices=[]), torch.inference_mode(False), torch.enable_grad():
            torch.manual_seed(0)
            model = DigitsMini()
            order = torch.Generator().manual_seed(1)
            x, y = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
            opt = torch.optim.Adam(model.parameters(), lr=DIGITS_LR)
            model.train()
            for _ in range(DIGITS_EPOCHS):
                for batch in torch.randperm(len(x), generator=order).split(DIGITS_BATCH):
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
                    opt.step()
        return {k: v.detach().clone() for k, v in model.eval().state_dict().items()}
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


@dataclass(frozen=True)
class Sample:
    name: str
    description: str
    build: Callable[[], nn.Module]
    inputs: tuple[InputSpec, ...]
    trained: bool = False      # weights from training on real data: its normalisation statistics are its own

    def model(self) -> nn.Module:
        # Seeded weights: the same sample gives the same numbers everywhere. Layers draw their initial weights from
        # torch's one global generator, so two threads building at once (the dashboard's warm-up and a first
        # visitor, both hashing the sample for its run key) would interleave their draws and get different weights:
        # one build at a time, on a forked generator that leaves the caller's random state as it was.
        with _BUILDING, torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            m = self.build()
            if not self.trained:
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
        Sample("digits-mini", "small CNN trained on scikit-learn's 8×8 digits (conv, BatchNorm, ReLU, max-pool, "
               "linear); carries its held-out split as a dataset for task accuracy", _trained_digits,
               (InputSpec("image", [1, 1, 8, 8], "float32", note="8×8 grey levels scaled to [0, 1]"),), trained=True),
    )
}
DEFAULT_SAMPLE = "tts-mini"


def bundled_dataset(name: str):
    """The dataset a bundled sample carries for task accuracy (inputs/dataset.Dataset), None for a sample without
    one: only a sample trained on real data has a meaningful one. digits-mini's is the 20 % of scikit-learn's
    digits its training never saw, each sample named by its index in load_digits()."""
    if name != "digits-mini":
        return None
    from .dataset_record import Dataset
    _, _, x_test, y_test, test_indices = _digits_split()
    return Dataset(name="digits-mini held-out split", arrays={"image": x_test[:, None]},   # (n, *[1, 1, 8, 8])
                   sample_names=[f"digits[{i}]" for i in test_indices], labels=y_test,
                   classes=[str(c) for c in range(10)], origin="sample", kind="arrays",
                   labels_from="scikit-learn digits, held-out 20 %", task="classification")
