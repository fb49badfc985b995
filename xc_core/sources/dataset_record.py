"""The `Dataset` record on its own (inputs/dataset.py loads and checks datasets, and re-exports it): the sources
layer makes one too — samples.py's `bundled_dataset`, which inputs/dataset.py calls — and may not import the inputs
layer above it, so what both sides need sits here, in a module of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Dataset:
    name: str                                  # the upload's file name or the sample's dataset name
    arrays: dict[str, Any]                     # model input name -> np.ndarray (samples, *input shape)
    sample_names: list[str]                    # one per sample: its file name, or "<name>[i]"
    labels: Any = None                         # np.ndarray (samples,) of int class ids, or None
    classes: list[str] = field(default_factory=list)   # class names by id, when known
    origin: str = "upload"                     # upload | sample
    kind: str = "arrays"                       # arrays | images | audio
    preprocessing: str = ""                    # the named preprocessing applied (images, audio)
    labels_from: str | None = None             # the labels file's name (or the sample's), None: no labels
    task: str = "classification"               # classification | per-sample
    metric: str = "cosine"                     # the per-sample metric for per-sample tasks
    notes: list[str] = field(default_factory=list)
    top_k: int = 5                             # k of the top-k agreement (classification)

    def __len__(self) -> int:
        return len(self.sample_names)
