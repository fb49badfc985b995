"""A fleet's manifest: which models a batch analyses, and with what inputs and options.

Three forms, told apart by what the path is:

- a folder: every model file in it (not its subfolders), in name order. Hidden files, `.npz` inputs, OpenVINO's
  `.bin` weights (the `.xml` beside them is the model) and ONNX external-data files are not models.
- a YAML file (`.yaml`, `.yml`): `models:` a list, each a source string or a mapping with `source` and, all
  optional, `name`, `inputs` (an .npz), `shape`, `dim`, `value`, `range` (mappings NAME: VALUE, as the flags of
  `xc analyze`) and `options` (TARGET.KEY: VALUE); and, at the top, an optional `targets:` list used when
  `--targets` is not given.
- any other file: one source a line; blank lines and lines starting with `#` are skipped.

A source is a path (relative paths are read from the manifest's folder) or `sample:NAME`. Every model gets a name
that is unique in the manifest (the file name without its extension, `-2`, `-3`… on a clash): its row in the
matrix and its run folder.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..errors import XcInputError

MODEL_KEYS = ("source", "name", "inputs", "shape", "dim", "value", "range", "options")
MAX_MODELS = 10_000
MAX_MANIFEST_BYTES = 4 << 20
# Files a folder manifest never lists: weights or data that belong to a model file beside them, and inputs.
_NOT_MODELS = (".bin", ".npz", ".data", ".onnx_data", ".weights", ".md", ".txt", ".json", ".yaml", ".yml", ".toml")
ACCEPTED = ("a text file of sources (one a line), a folder of model files, or a YAML file with `models:` (see "
            "xc batch --help)")


@dataclass(frozen=True)
class FleetModel:
    """One row of the matrix: a source and the flags `xc analyze` would take for it (as its flag strings)."""
    name: str
    source: str
    inputs: str | None = None
    shape: tuple[str, ...] = ()
    dim: tuple[str, ...] = ()
    value: tuple[str, ...] = ()
    range: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class Manifest:
    path: str
    models: list[FleetModel]
    targets: list[str] | None = None          # the YAML's `targets:`, when it has one
    notes: list[str] = field(default_factory=list)


def read_manifest(path: str) -> Manifest:
    """The manifest at `path`; anything wrong with it raises XcInputError naming the line or entry."""
    if os.path.isdir(path):
        models = _folder(path)
        targets = None
    elif os.path.isfile(path):
        text = _read_text(path)
        if path.lower().endswith((".yaml", ".yml")):
            models, targets = _yaml(path, text)
        else:
            models, targets = _lines(path, text), None
    else:
        raise XcInputError(f"{path}: no such file or folder (accepted: {ACCEPTED})")
    if not models:
        raise XcInputError(f"{path}: lists no models (accepted: {ACCEPTED})")
    if len(models) > MAX_MODELS:
        raise XcInputError(f"{path}: lists {len(models):,} models; at most {MAX_MODELS:,} in one batch")
    return Manifest(path, _unique_names(models), targets)


def shard(models: list[FleetModel], index: int, count: int) -> list[FleetModel]:
    """Shard `index` of `count` (1-based): every count-th model from the index-th, in manifest order. Fixed by the
    manifest alone, so CI jobs on different machines split it the same way, and the shards cover it once."""
    return models[index - 1::count]


def parse_shard(text: str) -> tuple[int, int]:
    """--shard I/N."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise XcInputError(f"--shard {text}: expected I/N with 1 ≤ I ≤ N, e.g. 1/4")
    return int(m.group(1)), int(m.group(2))


def _read_text(path: str) -> str:
    size = os.path.getsize(path)
    if size > MAX_MANIFEST_BYTES:
        raise XcInputError(f"{os.path.basename(path)}: {size / 2**20:.1f} MiB is too big for a manifest "
                           f"(at most {MAX_MANIFEST_BYTES >> 20} MiB; accepted: {ACCEPTED})")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        raise XcInputError(f"{os.path.basename(path)}: not UTF-8 text — is it a model? Give a manifest "
                           f"({ACCEPTED}), or analyse one model with xc analyze") from None
    except OSError as e:
        raise XcInputError(f"{path}: cannot read ({e.strerror})") from None


def _resolve(source: str, folder: str) -> str:
    if source.startswith("sample:"):
        return source
    return os.path.normpath(source if os.path.isabs(source) else os.path.join(folder, source))


def _lines(path: str, text: str) -> list[FleetModel]:
    folder = os.path.dirname(os.path.abspath(path))
    models = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "\x00" in line:
            raise XcInputError(f"{os.path.basename(path)} line {number}: not text — is it a model file? "
                               f"(accepted: {ACCEPTED})")
        models.append(FleetModel(name="", source=_resolve(line, folder)))
    return models


def _folder(path: str) -> list[FleetModel]:
    names = sorted(n for n in os.listdir(path)
                   if not n.startswith(".") and not n.lower().endswith(_NOT_MODELS)
                   and os.path.isfile(os.path.join(path, n)))
    return [FleetModel(name="", source=os.path.join(os.path.abspath(path), n)) for n in names]


def _yaml(path: str, text: str) -> tuple[list[FleetModel], list[str] | None]:
    import yaml
    where = os.path.basename(path)
    try:
        data = yaml.safe_load(text)       # plain data only: no tags that build objects
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        raise XcInputError(f"{where}{at}: not valid YAML ({getattr(e, 'problem', None) or type(e).__name__})") \
            from None
    if isinstance(data, list):
        data = {"models": data}
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise XcInputError(f"{where}: expected a mapping with `models:`, a list of sources (accepted: {ACCEPTED})")
    unknown = set(data) - {"models", "targets"}
    if unknown:
        raise XcInputError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (accepted: models, "
                           "targets)")
    targets = data.get("targets")
    if targets is not None:
        if isinstance(targets, str):
            targets = [t.strip() for t in targets.split(",") if t.strip()]
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets) or not targets:
            raise XcInputError(f"{where}: targets must be a list of target ids (or one comma-separated string)")
    folder = os.path.dirname(os.path.abspath(path))
    return [_yaml_model(entry, i, where, folder) for i, entry in enumerate(data["models"], 1)], targets


def _yaml_model(entry, number: int, where: str, folder: str) -> FleetModel:
    at = f"{where} models[{number}]"
    if isinstance(entry, str):
        return FleetModel(name="", source=_resolve(entry, folder))
    if not isinstance(entry, dict) or not isinstance(entry.get("source"), str) or not entry["source"].strip():
        raise XcInputError(f"{at}: expected a source string, or a mapping with source: PATH or sample:NAME")
    unknown = set(entry) - set(MODEL_KEYS)
    if unknown:
        raise XcInputError(f"{at}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (accepted: "
                           f"{', '.join(MODEL_KEYS)})")
    name = entry.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise XcInputError(f"{at}: name must be a non-empty string")
    inputs = entry.get("inputs")
    if inputs is not None and not isinstance(inputs, str):
        raise XcInputError(f"{at}: inputs must be the path of an .npz file")
    flags = {key: _flag_strings(entry.get(key), f"{at} {key}") for key in ("shape", "dim", "value", "range",
                                                                           "options")}
    return FleetModel(name=(name or "").strip(), source=_resolve(entry["source"].strip(), folder),
                      inputs=_resolve(inputs, folder) if inputs else None, **flags)


def _flag_strings(value, where: str) -> tuple[str, ...]:
    """A mapping NAME: VALUE (or a list of NAME=VALUE strings) as the flag strings `xc analyze` parses."""
    if value is None:
        return ()
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            if isinstance(v, bool):
                v = str(v).lower()
            elif isinstance(v, (list, tuple)):        # a shape as a list: [1, 3, 224, 224]
                v = "x".join(str(d) for d in v)
            out.append(f"{k}={v}")
        return tuple(out)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise XcInputError(f"{where}: expected a mapping NAME: VALUE (or a list of NAME=VALUE strings)")


def _unique_names(models: list[FleetModel]) -> list[FleetModel]:
    out, taken = [], set()
    for m in models:
        stem = m.name or _stem(m.source)
        name, n = stem, 1
        while name.lower() in taken:
            n += 1
            name = f"{stem}-{n}"
        taken.add(name.lower())
        out.append(FleetModel(**{**m.__dict__, "name": name}))
    return out


def _stem(source: str) -> str:
    if source.startswith("sample:"):
        return source.split(":", 1)[1]
    stem = os.path.basename(source.rstrip("/\\"))
    for ext in (".onnx", ".pt2", ".pt", ".pth", ".safetensors", ".mlmodel", ".zip", ".xml", ".tflite", ".ts"):
        if stem.lower().endswith(ext):
            return stem[:-len(ext)] or stem
    return stem


def folder_name(name: str) -> str:
    """A model's name as a folder name: the same for the same name, nothing a path could misread."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:64] or "model"
    if slug != name:        # two names that differ only where the slug replaced characters keep two folders
        import hashlib
        slug += "-" + hashlib.sha256(name.encode()).hexdigest()[:6]
    return slug
