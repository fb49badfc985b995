"""A dataset for task accuracy (--data, the dashboard's dataset upload, a bundled sample's held-out split): the
model's inputs for every sample stacked on a leading axis, with optional labels.

`Dataset` is what every producer hands on (the loaders below, sources/samples.py's `bundled_dataset`) and what the
pipeline writes into the run folder (dataset.npz, read back without pickles) for each target's worker.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import XcInputError
from ..limits import Limits, check_file_size, exceeded
from ..sources.dataset_record import Dataset  # its own module: sources/samples.py makes one too
from ..sources.spec import InputSpec


# ---- what can be asked for ------------------------------------------------------------------------------------------
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp")
AUDIO_EXTENSIONS = (".wav",)
ARRAY_EXTENSIONS = (".npy", ".npz")
LABEL_FILES = ("labels.csv", "labels.txt", "labels.json")
CLASSES_FILE = "classes.txt"
# Named preprocessings: what turns a decoded file into a model input. Each says what it does in the report.
IMAGE_PREPROCESSINGS = {
    "image-01": "pixels scaled to [0, 1]",
    "image-imagenet": "pixels scaled to [0, 1], then (x - ImageNet mean) / ImageNet std per channel",
    "image-raw": "pixels as 0..255 floats",
}
AUDIO_PREPROCESSINGS = {
    "audio-waveform": "mono float waveform in [-1, 1], cropped or zero-padded to the input's length",
}
PREPROCESSINGS = {**IMAGE_PREPROCESSINGS, **AUDIO_PREPROCESSINGS}
TASKS = ("auto", "classification", "per-sample")
METRICS = ("cosine", "rel_l2", "iou", "token_match")
DEFAULT_TOP_K = 5
_IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
# A decoded image bigger than this is refused before its pixels are decoded (a 1 KB PNG can claim 60,000²).
MAX_IMAGE_PIXELS = 50_000_000
DATASET_FILE, DATASET_INFO = "dataset.npz", "dataset.json"     # in the run folder (pipeline/plan.py)
_ACCEPTED = ("accepted: an .npz of arrays by input name (leading axis = samples), or a folder / .zip of per-sample "
             ".npy / .npz, images (.png .jpg .jpeg .bmp) or .wav files, with labels.csv, labels.txt or labels.json")


def check_options(preprocess: str | None = None, task: str | None = None, metric: str | None = None,
                  top_k: int | None = None) -> None:
    """Refuse an unknown preprocessing, task or metric, or a top-k below 1, before anything runs."""
    if preprocess and preprocess not in PREPROCESSINGS:
        raise XcInputError(f"--preprocess {preprocess}: unknown preprocessing (accepted: {', '.join(PREPROCESSINGS)})")
    if task and task not in TASKS:
        raise XcInputError(f"--task {task}: unknown task (accepted: {', '.join(TASKS)})")
    if metric and metric not in METRICS:
        raise XcInputError(f"--metric {metric}: unknown metric (accepted: {', '.join(METRICS)})")
    if top_k is not None and int(top_k) < 1:
        raise XcInputError(f"--top-k {top_k}: must be at least 1")


# ---- files, from a folder or a zip -----------------------------------------------------------------------------------
@dataclass
class _File:
    path: str          # relative to the dataset's root, '/'-separated (data, shown escaped, never code)
    size: int
    read: Callable[[], bytes]


def _listing(path: str, limits: Limits) -> tuple[list[_File], Any]:
    """Every file of a folder (symlinks are skipped: a link can point anywhere) or a zip (read with the safe zip
    reader); the open zip is returned to be closed by the caller."""
    label = os.path.basename(path.rstrip("/")) or path
    if os.path.isdir(path):
        files = []
        for root, dirs, names in os.walk(path, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not os.path.islink(os.path.join(root, d)))
            for n in sorted(names):
                full = os.path.join(root, n)
                if n.startswith(".") or os.path.islink(full) or not os.path.isfile(full):
                    continue
                rel = os.path.relpath(full, path).replace(os.sep, "/")
                files.append(_File(rel, os.path.getsize(full), functools.partial(_read_file, full)))
                if len(files) > limits.max_dataset_samples + len(LABEL_FILES) + 1:
                    raise exceeded("max_dataset_samples", f"{label}: the folder holds more than", len(files) - 2,
                                   limits)
        return files, None
    from ..sources.safe_zip import open_zip, read_member
    check_file_size(path, limits)
    z = open_zip(path, label, limits)
    files = []
    for info in z.infolist():
        parts = info.filename.split("/")
        if info.is_dir() or parts[0] == "__MACOSX" or any(p.startswith(".") for p in parts if p):
            continue
        files.append(_File(info.filename, info.file_size,
                           functools.partial(read_member, z, info, label, limits)))
    files.sort(key=lambda f: f.path)
    return files, z


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---- loading ----------------------------------------------------------------------------------------------------------
def load_dataset(path: str, specs: list[InputSpec], limits: Limits | None = None, *, feeds: dict | None = None,
                 preprocess: str | None = None, task: str | None = None, metric: str | None = None,
                 top_k: int | None = None) -> Dataset:
    """The dataset at `path` (an .npz, a folder or a .zip) as the model's inputs, every sample checked against
    `specs` (the resolved inputs: names, shapes, dtypes). Inputs the dataset does not hold take the run's own value
    (`feeds`) for every sample. Raises XcInputError with one line naming the problem and what is accepted."""
    limits = limits or Limits.from_env()
    check_options(preprocess, task, metric, top_k)
    name = os.path.basename(path.rstrip("/")) or path
    if not os.path.exists(path):
        raise XcInputError(f"--data {name}: no such file or folder ({_ACCEPTED})")
    if os.path.isfile(path) and path.lower().endswith(".npz"):
        ds = _load_arrays_npz(path, name, specs, limits)
    elif os.path.isdir(path) or (os.path.isfile(path) and path.lower().endswith(".zip")):
        files, z = _listing(path, limits)
        try:
            ds = _load_files(files, name, specs, limits, preprocess)
        finally:
            if z is not None:
                z.close()
    else:
        raise XcInputError(f"--data {name}: not a dataset ({_ACCEPTED})")
    if preprocess and ds.kind == "arrays":
        ds.notes.append(f"--preprocess {preprocess} does not apply to arrays; they are fed as stored")
    ds.task = task or "auto"
    ds.metric = metric or ""
    ds.top_k = int(top_k or DEFAULT_TOP_K)
    complete(ds, specs, feeds or {}, limits)
    return ds


def complete(ds: Dataset, specs: list[InputSpec], feeds: dict, limits: Limits) -> None:
    """Check every array against the model's inputs (the sample axis apart) and fill the inputs the dataset does not
    hold with the run's own value, the same for every sample."""
    by_name = {s.name: s for s in specs}
    unknown = sorted(set(ds.arrays) - set(by_name))
    if unknown:
        raise XcInputError(f"{ds.name}: '{unknown[0][:80]}' is not an input of the model (its inputs: "
                           f"{', '.join(by_name)})")
    if not ds.arrays:
        raise XcInputError(f"{ds.name}: holds no model input (the model's inputs: {', '.join(by_name)})")
    n = len(ds.sample_names)
    if n == 0:
        raise XcInputError(f"{ds.name}: holds no samples ({_ACCEPTED})")
    if n > limits.max_dataset_samples:
        raise exceeded("max_dataset_samples", f"{ds.name}: the dataset holds", n, limits)
    for input_name, arr in list(ds.arrays.items()):
        ds.arrays[input_name] = _as_input(arr, by_name[input_name], ds.name, n)
    for s in specs:
        if s.name not in ds.arrays:
            if s.name not in feeds:
                raise XcInputError(f"{ds.name}: holds no values for the input '{s.name}' (it holds "
                                   f"{', '.join(ds.arrays)})")
            ds.arrays[s.name] = np.repeat(np.asarray(feeds[s.name])[None], n, axis=0)
            ds.notes.append(f"input '{s.name}' is not in the dataset: every sample uses the run's own value")
    total = sum(a.nbytes for a in ds.arrays.values())
    if total > limits.bytes("max_dataset_mb"):
        raise exceeded("max_dataset_mb", f"{ds.name}: the samples hold", total, limits)
    if ds.labels is not None:
        labels = np.asarray(ds.labels)
        if labels.shape != (n,) or labels.dtype.kind not in "iu":
            raise XcInputError(f"{ds.name}: the labels are {labels.dtype} of shape {list(labels.shape)}; accepted: "
                               f"one integer class id per sample ({n})")
        ds.labels = labels.astype(np.int64)


def _as_input(arr, spec: InputSpec, label: str, n: int) -> np.ndarray:
    """(n, *spec.shape) in the input's dtype; a batch-1 input also takes samples without their batch axis."""
    arr = np.asarray(arr)
    want = tuple(int(d) for d in spec.shape)
    if arr.shape[:1] != (n,):
        raise XcInputError(f"{label}: input '{spec.name}' has {arr.shape[0] if arr.ndim else 0} samples, the "
                           f"dataset {n}")
    per_sample = arr.shape[1:]
    if per_sample != want:
        if want[:1] == (1,) and per_sample == want[1:]:
            arr = arr[:, None]
        else:
            raise XcInputError(f"{label}: input '{spec.name}' samples have shape {list(per_sample)}, the model "
                               f"runs {list(want)} (a batch-1 input takes one sample at a time; set another "
                               "shape with --shape or --dim)", fix=None, inputs=[spec.name])
    target = _dtype(spec.dtype)
    if target.kind in "iub" and arr.dtype.kind == "f":
        raise XcInputError(f"{label}: input '{spec.name}' is {spec.dtype} but the samples are {arr.dtype} "
                           "(accepted: integer samples for an integer input)")
    if arr.dtype.kind not in "biuf":
        raise XcInputError(f"{label}: input '{spec.name}' samples are {arr.dtype}; accepted: bool, integer or float")
    return np.ascontiguousarray(arr.astype(target, copy=False))


def _dtype(name: str) -> np.dtype:
    from .values import _np_dtype
    return np.dtype(_np_dtype(name))


def _load_npy(data: bytes, label: str, member: str) -> np.ndarray:
    """One .npy from bytes: a plain numeric array, never unpickled."""
    from .values import _npy_header
    f = io.BytesIO(data)
    _npy_header(f, label, member, _ACCEPTED)       # refuses object, structured and non-numeric arrays
    f.seek(0)
    try:
        return np.lib.format.read_array(f, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 — truncated data: one line naming the file
        raise XcInputError(f"{label}: '{member[:80]}' cannot be read ({type(e).__name__}); the file is damaged") \
            from None


def _load_npz_bytes(data: bytes, label: str, member: str, limits: Limits) -> dict[str, np.ndarray]:
    from ..sources.safe_zip import open_zip, read_member
    out = {}
    with open_zip(data, f"{label}: {member[:80]}", limits) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            if not info.filename.endswith(".npy"):
                raise XcInputError(f"{label}: '{member[:80]}' holds '{info.filename[:80]}', which is not an array "
                                   f"({_ACCEPTED})")
            out[info.filename[:-4]] = _load_npy(read_member(z, info, label, limits), label,
                                                f"{member}:{info.filename}")
    return out


def _load_arrays_npz(path: str, name: str, specs: list[InputSpec], limits: Limits) -> Dataset:
    """One .npz: an array per model input, samples on the leading axis, and an optional `labels` array."""
    check_file_size(path, limits)
    size = os.path.getsize(path)
    if size > limits.bytes("max_dataset_mb"):
        raise exceeded("max_dataset_mb", f"{name}: the file is", size, limits)
    with open(path, "rb") as f:
        arrays = _load_npz_bytes(f.read(), name, name, limits)
    labels = arrays.pop("labels", None)
    if not arrays:
        raise XcInputError(f"{name}: holds no arrays by input name ({_ACCEPTED})")
    counts = {k: (v.shape[0] if v.ndim else 0) for k, v in arrays.items()}
    n = next(iter(counts.values()))
    if any(c != n for c in counts.values()):
        raise XcInputError(f"{name}: the arrays hold different numbers of samples ({counts}); accepted: one leading "
                           "sample axis of the same length in every array")
    if n > limits.max_dataset_samples:
        raise exceeded("max_dataset_samples", f"{name}: the dataset holds", n, limits)
    stem = os.path.splitext(name)[0]
    return Dataset(name=name, arrays=arrays, sample_names=[f"{stem}[{i}]" for i in range(n)], labels=labels,
                   kind="arrays", labels_from=f"{name}: labels" if labels is not None else None)


def _load_files(files: list[_File], name: str, specs: list[InputSpec], limits: Limits,
                preprocess: str | None) -> Dataset:
    """Per-sample files (one kind throughout) and the label files beside them."""
    meta = {}
    samples = []
    for f in files:
        base = f.path.rsplit("/", 1)[-1].lower()
        if base in LABEL_FILES + (CLASSES_FILE,):
            if base in meta:
                raise XcInputError(f"{name}: holds two {base} files ('{meta[base].path[:80]}' and '{f.path[:80]}')")
            meta[base] = f
        elif base.endswith(IMAGE_EXTENSIONS + AUDIO_EXTENSIONS + ARRAY_EXTENSIONS):
            samples.append(f)
        else:
            raise XcInputError(f"{name}: '{f.path[:80]}' is not a sample ({_ACCEPTED})")
    if not samples:
        raise XcInputError(f"{name}: holds no samples ({_ACCEPTED})")
    if len(samples) > limits.max_dataset_samples:
        raise exceeded("max_dataset_samples", f"{name}: the dataset holds", len(samples), limits)
    total = 0
    for f in samples + list(meta.values()):
        if f.size > limits.bytes("max_sample_mb"):
            raise exceeded("max_sample_mb", f"{name}: '{f.path[:80]}' is", f.size, limits)
        total += f.size
    if total > limits.bytes("max_dataset_mb"):
        raise exceeded("max_dataset_mb", f"{name}: the files hold", total, limits)
    kinds = {_kind_of(f.path) for f in samples}
    if len(kinds) > 1:
        raise XcInputError(f"{name}: mixes {' and '.join(sorted(kinds))} samples; accepted: one kind per dataset")
    kind = kinds.pop()
    ds = Dataset(name=name, arrays={}, sample_names=[f.path for f in samples], kind=kind)
    if kind == "arrays":
        ds.arrays = _per_sample_arrays(samples, name, specs, limits)
    elif kind == "images":
        _images(ds, samples, specs, preprocess or "image-01", preprocess is None)
    else:
        _audio(ds, samples, specs, preprocess or "audio-waveform", preprocess is None)
    _labels(ds, meta, name, limits)
    return ds


def _kind_of(path: str) -> str:
    p = path.lower()
    return "images" if p.endswith(IMAGE_EXTENSIONS) else "audio" if p.endswith(AUDIO_EXTENSIONS) else "arrays"


def _per_sample_arrays(samples: list[_File], name: str, specs: list[InputSpec], limits: Limits) -> dict:
    per_input: dict[str, list] = {}
    for f in samples:
        if f.path.lower().endswith(".npy"):
            if len(specs) != 1:
                raise XcInputError(f"{name}: '{f.path[:80]}' is a .npy, which fits single-input models; this one "
                                   f"takes {', '.join(s.name for s in specs)} (accepted: per-sample .npz files with "
                                   "an array per input name)")
            arrays = {specs[0].name: _load_npy(f.read(), name, f.path)}
        else:
            arrays = _load_npz_bytes(f.read(), name, f.path, limits)
        if per_input and set(arrays) != set(per_input):
            raise XcInputError(f"{name}: '{f.path[:80]}' holds {sorted(arrays)}, the samples before it "
                               f"{sorted(per_input)}; accepted: the same inputs in every sample")
        for k, v in arrays.items():
            if per_input.get(k) and per_input[k][0].shape != v.shape:
                raise XcInputError(f"{name}: '{f.path[:80]}' input '{k[:80]}' has shape {list(v.shape)}, the "
                                   f"samples before it {list(per_input[k][0].shape)}")
            per_input.setdefault(k, []).append(v)
    return {k: np.stack(v) for k, v in per_input.items()}


def _the_input(specs: list[InputSpec], ranks: tuple[int, ...], what: str, name: str) -> InputSpec:
    """The one float input of a fitting rank that decoded files feed."""
    fits = [s for s in specs if len(s.shape) in ranks and _dtype(s.dtype).kind == "f" and s.value is None]
    if len(fits) != 1:
        raise XcInputError(f"{name}: {what} feed one float input of rank {' or '.join(map(str, ranks))}; this model "
                           f"has {len(fits)} ({', '.join(f'{s.name} {list(s.shape)}' for s in specs)}); accepted "
                           "for it: an .npz of arrays by input name")
    return fits[0]


def image_layout(shape: list[int]) -> str:
    """NHWC when the last dim looks like channels (1 or 3) and the second does not, NCHW otherwise."""
    channel_like = (1, 3)
    return "NHWC" if shape[-1] in channel_like and shape[-3] not in channel_like else "NCHW"


def _images(ds: Dataset, samples: list[_File], specs: list[InputSpec], preprocess: str, defaulted: bool) -> None:
    if preprocess not in IMAGE_PREPROCESSINGS:
        raise XcInputError(f"--preprocess {preprocess}: does not apply to images (accepted: "
                           f"{', '.join(IMAGE_PREPROCESSINGS)})")
    spec = _the_input(specs, (3, 4), "images", ds.name)
    layout = image_layout(list(spec.shape))
    channels, h, w = ((spec.shape[-1], spec.shape[-3], spec.shape[-2]) if layout == "NHWC"
                      else (spec.shape[-3], spec.shape[-2], spec.shape[-1]))
    if channels not in (1, 3):
        raise XcInputError(f"{ds.name}: input '{spec.name}' {list(spec.shape)} has {channels} channels; images feed "
                           "1 (grey) or 3 (RGB)")
    pixels = np.stack([_decode_image(f, ds.name, "L" if channels == 1 else "RGB", w, h) for f in samples])
    x = pixels.astype(np.float32)                                   # (n, h, w[, 3])
    if x.ndim == 3:
        x = x[..., None]
    if preprocess != "image-raw":
        x /= 255.0
    if preprocess == "image-imagenet":
        mean, std = ((_IMAGENET_MEAN, _IMAGENET_STD) if channels == 3
                     else (_IMAGENET_MEAN.mean(keepdims=True), _IMAGENET_STD.mean(keepdims=True)))
        x = (x - mean) / std
    if layout == "NCHW":
        x = x.transpose(0, 3, 1, 2)
    if len(spec.shape) == 4:
        if spec.shape[0] != 1:
            raise XcInputError(f"{ds.name}: input '{spec.name}' {list(spec.shape)} runs a batch of {spec.shape[0]}; "
                               "images feed a batch-1 input one at a time (set --dim or --shape for a batch of 1)")
        x = x[:, None]                                              # the batch axis of a batch-1 input
    ds.arrays = {spec.name: np.ascontiguousarray(x)}
    ds.preprocessing = preprocess
    ds.notes.append(f"images: {IMAGE_PREPROCESSINGS[preprocess]}{' (the default)' if defaulted else ''}, resized to "
                    f"{h}×{w}, {'grey' if channels == 1 else 'RGB'}, laid out {layout} for input '{spec.name}'")


def _decode_image(f: _File, name: str, mode: str, w: int, h: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(f.read())) as img:
            if img.width * img.height > MAX_IMAGE_PIXELS:
                raise XcInputError(f"{name}: '{f.path[:80]}' is {img.width}×{img.height} pixels (at most "
                                   f"{MAX_IMAGE_PIXELS:,} are decoded)")
            return np.asarray(img.convert(mode).resize((int(w), int(h)), Image.BILINEAR))
    except XcInputError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise XcInputError(f"{name}: '{f.path[:80]}' is not a readable image ({type(e).__name__}); accepted: "
                           ".png, .jpg, .jpeg, .bmp") from None


def _audio(ds: Dataset, samples: list[_File], specs: list[InputSpec], preprocess: str, defaulted: bool) -> None:
    if preprocess not in AUDIO_PREPROCESSINGS:
        raise XcInputError(f"--preprocess {preprocess}: does not apply to audio (accepted: "
                           f"{', '.join(AUDIO_PREPROCESSINGS)})")
    spec = _the_input(specs, (1, 2, 3), "audio files", ds.name)
    if any(d != 1 for d in spec.shape[:-1]):
        raise XcInputError(f"{ds.name}: input '{spec.name}' {list(spec.shape)} is not a waveform (accepted: every dim "
                           "1 but the last, the number of samples)")
    length = int(spec.shape[-1])
    waves, rates = [], set()
    for f in samples:
        wave_, rate = _decode_wav(f, ds.name)
        rates.add(rate)
        fitted = np.zeros(length, dtype=np.float32)
        fitted[:min(length, len(wave_))] = wave_[:length]
        waves.append(fitted)
    ds.arrays = {spec.name: np.stack(waves).reshape((len(samples), *spec.shape))}
    ds.preprocessing = preprocess
    ds.notes.append(f"audio: {AUDIO_PREPROCESSINGS[preprocess]} ({length:,} samples){' (the default)' if defaulted else ''}"
                    f"; sample rate found: {', '.join(f'{r:,} Hz' for r in sorted(rates))} (not resampled)")


def _decode_wav(f: _File, name: str) -> tuple[np.ndarray, int]:
    import wave
    try:
        with wave.open(io.BytesIO(f.read()), "rb") as w:
            width, channels, rate, frames = w.getsampwidth(), w.getnchannels(), w.getframerate(), w.getnframes()
            raw = w.readframes(frames)
    except (wave.Error, EOFError, OSError) as e:
        raise XcInputError(f"{name}: '{f.path[:80]}' is not a readable .wav ({type(e).__name__}); accepted: PCM "
                           "WAVE, 8, 16, 24 or 32 bits") from None
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / (1 << 23)
    elif width == 4:
        x = np.frombuffer(raw, "<i4").astype(np.float32) / (1 << 31)
    else:
        raise XcInputError(f"{name}: '{f.path[:80]}' has {width * 8}-bit samples; accepted: 8, 16, 24 or 32 bits")
    x = x[: len(x) - len(x) % max(channels, 1)].reshape(-1, max(channels, 1)).mean(axis=1)
    return np.clip(x, -1.0, 1.0), rate


# ---- labels -----------------------------------------------------------------------------------------------------------
def _labels(ds: Dataset, meta: dict[str, _File], name: str, limits: Limits) -> None:
    """labels.csv (file,label), labels.txt (one per line, files sorted by name) or labels.json ({file: label});
    classes.txt (one name a line) names the classes, and then labels may be names."""
    if CLASSES_FILE in meta:
        ds.classes = [c.strip() for c in _text(meta[CLASSES_FILE], name).splitlines() if c.strip()]
    given = [k for k in LABEL_FILES if k in meta]
    if len(given) > 1:
        raise XcInputError(f"{name}: holds {' and '.join(given)}; accepted: one labels file")
    if not given:
        return
    which = given[0]
    text = _text(meta[which], name)
    if which == "labels.txt":
        values = [line.strip() for line in text.splitlines() if line.strip()]
        if len(values) != len(ds.sample_names):
            raise XcInputError(f"{name}: labels.txt has {len(values)} labels for {len(ds.sample_names)} samples "
                               "(accepted: one label a line, for the files sorted by name)")
        by_file = dict(zip(ds.sample_names, values))
    elif which == "labels.csv":
        import csv
        by_file = {}
        for row in csv.reader(io.StringIO(text)):
            if not row or not "".join(row).strip():
                continue
            if len(row) != 2:
                raise XcInputError(f"{name}: labels.csv has a row of {len(row)} fields; accepted: file,label")
            by_file[row[0].strip()] = row[1].strip()
        if by_file and not any(_matches(k, ds.sample_names) for k in list(by_file)[:1]):
            by_file.pop(next(iter(by_file)))          # a header row ("file,label")
    else:
        try:
            loaded = json.loads(text)
        except ValueError as e:
            raise XcInputError(f"{name}: labels.json is not JSON ({e.msg}); accepted: {{\"file\": label}}") from None
        if not isinstance(loaded, dict):
            raise XcInputError(f"{name}: labels.json is a {type(loaded).__name__}; accepted: {{\"file\": label}}")
        by_file = {str(k): v for k, v in loaded.items()}
    by_base = {k.rsplit("/", 1)[-1]: v for k, v in by_file.items()}
    labels = []
    for sample in ds.sample_names:
        value = by_file.get(sample, by_base.get(sample.rsplit("/", 1)[-1]))
        if value is None:
            raise XcInputError(f"{name}: {which} has no label for '{sample[:80]}' (accepted: a label for every "
                               "sample)")
        labels.append(_class_id(value, ds.classes, name, which))
    ds.labels = np.asarray(labels, dtype=np.int64)
    ds.labels_from = which


def _matches(key: str, samples: list[str]) -> bool:
    return key in samples or any(s.rsplit("/", 1)[-1] == key for s in samples)


def _class_id(value, classes: list[str], name: str, which: str) -> int:
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    if text in classes:
        return classes.index(text)
    hint = "it is not in classes.txt" if classes else "names need a classes.txt (one class name a line, by id)"
    raise XcInputError(f"{name}: {which} gives the label '{text[:80]}'; {hint} (accepted: class ids or names from "
                       "classes.txt)")


def _text(f: _File, name: str) -> str:
    try:
        return f.read().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise XcInputError(f"{name}: '{f.path[:80]}' is not UTF-8 text") from None


# ---- the run folder's copy ------------------------------------------------------------------------------------------
def save(ds: Dataset, run_dir: str) -> None:
    """dataset.npz (the arrays, `input:NAME`, and `labels`) and dataset.json (everything else) in the run folder."""
    arrays = {f"input:{k}": v for k, v in ds.arrays.items()}
    if ds.labels is not None:
        arrays["labels"] = np.asarray(ds.labels)
    np.savez(os.path.join(run_dir, DATASET_FILE), **arrays)
    info = {k: v for k, v in dataclasses.asdict(ds).items() if k not in ("arrays", "labels")}
    from ..paths import write_json_atomic
    write_json_atomic(os.path.join(run_dir, DATASET_INFO), info)


def read(run_dir: str) -> Dataset | None:
    """The dataset `save` wrote, None when the run has none."""
    info_path = os.path.join(run_dir, DATASET_INFO)
    if not os.path.exists(info_path):
        return None
    with open(info_path) as f:
        info = json.load(f)
    with np.load(os.path.join(run_dir, DATASET_FILE), allow_pickle=False) as z:
        arrays = {k.split(":", 1)[1]: z[k] for k in z.files if k.startswith("input:")}
        labels = z["labels"] if "labels" in z.files else None
    known = {f.name for f in dataclasses.fields(Dataset)}
    return Dataset(**{k: v for k, v in info.items() if k in known}, arrays=arrays, labels=labels)


def block(ds: Dataset) -> dict:
    """The report's `dataset` block (report/types.py DatasetBlock)."""
    return {"name": ds.name, "origin": ds.origin, "samples": len(ds), "inputs": list(ds.arrays), "kind": ds.kind,
            "preprocessing": ds.preprocessing, "labels": ds.labels_from, "classes": list(ds.classes),
            "sample_names": list(ds.sample_names), "task": ds.task, "metric": ds.metric, "notes": list(ds.notes)}


def digest(path: str) -> str:
    """The dataset's content for the run key: a file's sha256, or a folder's files by relative path."""
    from ..paths import sha256_file
    if os.path.isfile(path):
        return sha256_file(path)
    h = hashlib.sha256()
    for root, dirs, names in os.walk(path, followlinks=False):
        dirs.sort()
        for n in sorted(names):
            full = os.path.join(root, n)
            if os.path.isfile(full) and not os.path.islink(full):
                h.update(os.path.relpath(full, path).replace(os.sep, "/").encode() + b"\0")
                h.update(sha256_file(full).encode())
    return h.hexdigest()


def prepare(request: dict | None, src, feeds: dict, limits: Limits, run_dir: str) -> Dataset | None:
    """The run's dataset, written into its run folder: `request["path"]` (--data) loaded against the resolved
    inputs, else a bundled sample's own (sources/samples.py), else None. `request` also carries the preprocessing,
    task, metric and top-k asked for."""
    request = request or {}
    options = {k: request.get(k) for k in ("preprocess", "task", "metric", "top_k")}
    if request.get("path"):
        ds = load_dataset(request["path"], src.inputs, limits, feeds=feeds, **options)
    elif src.kind == "sample":
        from ..sources.samples import bundled_dataset
        ds = bundled_dataset(src.name)
        if ds is None:
            return None
        check_options(**options)
        ds.task = options["task"] or ds.task or "auto"
        ds.metric = options["metric"] or ds.metric
        ds.top_k = int(options["top_k"] or ds.top_k or DEFAULT_TOP_K)
        ds.arrays = dict(ds.arrays)
        complete(ds, src.inputs, feeds, limits)
    else:
        return None
    save(ds, run_dir)
    return ds


def dataset_key(path: str | None, preprocess: str | None = None, task: str | None = None, metric: str | None = None,
                top_k: int | None = None) -> dict | None:
    """The dataset's part of a run key (run_keys.request_parts): its content and the options it runs with; None
    without one, so runs without a dataset keep their keys."""
    options = {"preprocess": preprocess, "task": task, "metric": metric, "top_k": top_k}
    if not path and not any(v is not None for v in options.values()):
        return None
    if path and not os.path.exists(path):
        raise XcInputError(f"--data {os.path.basename(path.rstrip('/')) or path}: no such file or folder")
    return {"sha256": digest(path) if path else None, **{k: v for k, v in options.items() if v is not None}}


def dataset_flags(parser) -> None:
    """`xc analyze`'s dataset flags."""
    g = parser.add_argument_group("task accuracy", "run every sample of a dataset on every target and compare the "
                                  "answers with the reference's and the labels")
    g.add_argument("--data", metavar="PATH", help="an .npz of arrays by input name (leading axis = samples, optional "
                   "`labels`), or a folder / .zip of per-sample .npy / .npz, images or .wav files with labels.csv, "
                   "labels.txt or labels.json (and classes.txt)")
    g.add_argument("--preprocess", choices=list(PREPROCESSINGS), default=None,
                   help="how images or audio become the model's input (default: image-01 / audio-waveform)")
    g.add_argument("--task", choices=list(TASKS), default=None,
                   help="classification (top-1/top-k, labels) or per-sample (a metric per sample); default auto: "
                        "classification when an output is (samples, classes)")
    g.add_argument("--metric", choices=list(METRICS), default=None,
                   help="the per-sample metric (default cosine; token_match for integer outputs); iou reads boxes "
                        "(samples, [1,] boxes, ≥5: x1 y1 x2 y2 score …) scoring at least 0.5")
    g.add_argument("--top-k", type=int, default=None, metavar="K", help=f"k of the top-k agreement (default "
                   f"{DEFAULT_TOP_K})")
