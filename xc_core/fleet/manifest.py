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

import functools
import os
import re
from dataclasses import dataclass, field

from ..errors import XcInputError, printable_line

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
    """The manifest at `path`; anything wrong with it raises XcInputError naming the line or entry. The manifest is
    read only as a regular file inside its folder, and a model or inputs path it names that is a special file
    (a /proc entry, a device, a FIFO, a socket) is refused (safe_files); a folder manifest lists regular files
    only."""
    if os.path.isdir(path):
        models = _folder(path)
        targets = None
    elif os.path.lexists(path):
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
    for number, m in enumerate(models, 1):
        _check_not_special(m.source, path, number, "model")
        if m.inputs:
            _check_not_special(m.inputs, path, number, "inputs")
    return Manifest(path, _unique_names(models), targets)


def _check_not_special(source: str, manifest: str, number: int, what: str) -> None:
    """A path a manifest names that is there must be a regular file (or a folder: the analysis says what it
    accepts); one that is not there is that model's error when the batch plans it."""
    from ..safe_files import special_kind
    if source.startswith("sample:") or not os.path.lexists(source):
        return
    real = os.path.realpath(source)
    try:
        st = os.stat(real)
    except OSError:
        return              # a symlink to nothing: as a missing file
    kind = special_kind(st, real)
    if kind and kind != "a folder":
        raise XcInputError(f"{os.path.basename(manifest)} model {number}: {what} {printable_line(source)[:200]} is "
                           f"{kind}, not a regular file (accepted: a model file, or sample:NAME)")


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
    from ..safe_files import read_regular
    name = os.path.basename(path)
    data = read_regular(path, root=os.path.dirname(os.path.abspath(path)), max_bytes=MAX_MANIFEST_BYTES, shown=path,
                        too_big=lambda size: XcInputError(f"{name}: {size / 2**20:.1f} MiB is too big for a manifest "
                                                          f"(at most {MAX_MANIFEST_BYTES >> 20} MiB; accepted: "
                                                          f"{ACCEPTED})"))
    try:
        return data.decode("utf-8-sig")        # an editor's byte-order mark is not part of the first line
    except UnicodeDecodeError:
        raise XcInputError(f"{name}: not UTF-8 text — is it a model? Give a manifest ({ACCEPTED}), or analyse one "
                           "model with xc analyze") from None


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
    """The folder's model files: its regular files (not its subfolders'); a symlink or special file there is
    skipped with a warning (safe_files) — list such a model by its path in a text manifest instead."""
    from ..safe_files import regular_files, warn_skipped
    try:
        names = os.listdir(path)
    except OSError as e:
        raise XcInputError(f"{path}: cannot list the folder ({e.strerror or type(e).__name__})") from None
    not_models = tuple(n for n in names if n.startswith(".") or n.lower().endswith(_NOT_MODELS))
    tree = regular_files(path, exclude_top=not_models, recursive=False)
    if not tree.files and tree.skipped:     # nothing left to run: one refusal that says why, not a warning and then one
        first = ", ".join(f"{printable_line(n)[:80]} ({why})" for n, why in list(tree.skipped.items())[:3])
        raise XcInputError(f"{printable_line(path)}: lists no models — its {len(tree.skipped)} entr"
                           f"{'y is' if len(tree.skipped) == 1 else 'ies are'} not regular files ({first}; symlinks "
                           "are not followed: list such a model by its path in a text manifest)")
    warn_skipped(path, tree.skipped)
    return [FleetModel(name="", source=os.path.join(os.path.abspath(path), n)) for n in sorted(tree.files)]


def _yaml(path: str, text: str) -> tuple[list[FleetModel], list[str] | None]:
    import yaml
    where = os.path.basename(path)
    try:
        data = _load_yaml_bounded(text, where)   # plain data only: no tags that build objects
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


# ---- YAML, bounded -----------------------------------------------------------------------------------------------
# An alias is a reference: a few lines of nested anchors (&a [*b, *b, …]) stand for billions of values, and the
# first str() or walk over them ("billion laughs") fills memory. The loader charges each alias the size of what it
# stands for, and each node its own; past these budgets the manifest is refused in one line. A real manifest of
# MAX_MODELS models with their flags stays far below them; a 4 MiB file without aliases cannot reach them.
MAX_YAML_NODES = 1_000_000          # nodes, aliases expanded
MAX_YAML_CHARS = 4 * MAX_MANIFEST_BYTES  # characters of scalars, aliases expanded
MAX_YAML_ALIASES = 100_000
MAX_YAML_DEPTH = 32


def _load_yaml_bounded(text: str, where: str):
    """The YAML document in `text` as plain data (SafeLoader: no tags that build objects), within the budgets."""
    loader = _bounded_loader()(text, where)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


@functools.cache
def _bounded_loader():
    import yaml

    class BoundedYamlLoader(yaml.SafeLoader):
        """yaml.SafeLoader that counts what it composes, aliases expanded, and stops past the budgets above."""

        def __init__(self, stream, where: str):
            super().__init__(stream)
            self.where = where
            self.nodes = self.chars = self.aliases = self.depth = 0
            self.anchored: dict[int, tuple[object, int, int]] = {}   # id(node) → (node, its nodes, its chars)

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent):
                node = super().compose_node(parent, index)         # the anchored node (or undefined: an error)
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    self._refuse(event, f"too many aliases (more than {MAX_YAML_ALIASES:,})")
                known = self.anchored.get(id(node))
                if known is None:       # an alias inside its own anchor: a structure without end
                    self._refuse(event, "too many aliases: an alias inside its own anchor (a recursive structure)")
                self._charge(event, known[1], known[2], alias=True)
                return node
            self.depth += 1
            if self.depth > MAX_YAML_DEPTH:
                self._refuse(event, f"nested deeper than {MAX_YAML_DEPTH} levels")
            nodes, chars = self.nodes, self.chars
            node = super().compose_node(parent, index)
            self.depth -= 1
            self._charge(event, 1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0)
            if event.anchor is not None:
                self.anchored[id(node)] = (node, self.nodes - nodes, self.chars - chars)
            return node

        def _charge(self, event, nodes: int, chars: int, alias: bool = False) -> None:
            self.nodes += nodes
            self.chars += chars
            if self.nodes > MAX_YAML_NODES or self.chars > MAX_YAML_CHARS:
                what = (f"more than {MAX_YAML_NODES:,} values" if self.nodes > MAX_YAML_NODES else
                        f"more than {MAX_YAML_CHARS >> 20} Mi characters")
                self._refuse(event, f"too many aliases: expanded they make {what} (a manifest lists its models; "
                                    "an alias may repeat a few flags)" if alias else
                             f"{what}; at most {MAX_YAML_NODES:,} values in a manifest")

        def _refuse(self, event, what: str):
            raise XcInputError(f"{self.where} line {event.start_mark.line + 1}: {what} (accepted: {ACCEPTED})")

    return BoundedYamlLoader
