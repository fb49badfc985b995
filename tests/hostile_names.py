"""Names an attacker puts in a model, and tiny models that carry them everywhere a name can go.

Each payload tries to create a canary file if it ever runs as Python (or shell): through torch.fx's generated
`getattr(self, "<name>")`, a format string, an f-string, a newline that starts a statement of its own. Others try
the other sinks a name can reach: Graphviz's HTML labels (an <IMG> reads a file from disk), DOT syntax, SQL,
Markdown and HTML in the reports, paths built from names, very long names, and Unicode that looks like something
else. bench/fuzz.py runs them at scale; tests/test_hostile_names.py runs them through every target.
"""
from __future__ import annotations

import numpy as np


def payloads(canary: str) -> list[str]:
    """One name per way of escaping. `canary` is an absolute path without dots (the fx route splits names on dots)."""
    touch = f"touch {canary}"
    return [
        # torch.fx writes getattr(self, "<name>"): close the string, run an expression, reopen it
        f'x", getattr(__import__("os"), "system")("{touch}")) and getattr(self, "r',
        f"x', getattr(__import__('os'), 'system')('{touch}')) and getattr(self, 'r",
        # a newline ends the generated line: what follows is a statement of its own
        f'a")\nimport os\nos_system = getattr(os, "system"); os_system("{touch}")\n#',
        # a backslash to eat the closing quote
        f'a\\", getattr(__import__("os"), "system")("{touch}"), "',
        # a bare expression, for code that writes names without quotes
        f'__import__("os").system("{touch}")',
        # str.format / f-string / %-format fields
        f"{{__import__('os').system('{touch}')}}%s%(x)s",
        # Graphviz HTML-like labels: <IMG> reads a file; and a DOT statement breakout
        '<IMG SRC="/etc/passwd"/>',
        '"]; evil [label="x"]; x [label="',
        # SQL, Markdown, HTML, an @mention a PR comment would ping
        "'); DROP TABLE runs; --",
        "[click](https://evil.example) @octocat <img src=x onerror=alert(1)> | cell",
        # paths built from names
        "../../../../tmp/escaped",
        # Unicode: fullwidth letters (NFKC makes them 'exec' in a Python identifier), Cyrillic а, a right-to-left
        # override, a zero-width space
        "ｅｘｅｃ",
        "\u0430\u202eb\u200bc",
        # control characters and very long names
        "tab\tcr\rnul\x00bell\x07",
        "L" * 4096,
        "M" * 190,
        # the same without quotes or dots, which every reader lets through
        "<IMG SRC=/etc/passwd/>",
        "]; evil [label=x]; x [label=",
        "{__import__(chr(111)+chr(115))}",
        "); DROP TABLE runs; --",
        "@octocat [click](javascript:alert(1)) <script>alert(1)</script> | cell",
    ]


def hostile_onnx(path: str, canary: str, batch_dim: str | None = None) -> str:
    """A small valid ONNX graph whose every name is a payload: two inputs, a chain of Add / Mul / Relu nodes (one
    per payload) each with an initializer, intermediate values and value_info, two outputs, a graph name and doc
    string, torch.onnx's name-scope metadata — all hostile. It computes (x + Σw) · …, which every target runs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    names = payloads(canary)
    rng = np.random.default_rng(0)
    dim = batch_dim if batch_dim is not None else 2

    def name(i: int, role: str) -> str:
        # unique per role and position, the payload left intact at the front or back
        return f"{role}{i}{names[i % len(names)]}" if i % 2 else f"{names[i % len(names)]}{role}{i}"

    x0, x1 = name(0, "in"), name(1, "in")
    inputs = [helper.make_tensor_value_info(x0, TensorProto.FLOAT, [dim, 8]),
              helper.make_tensor_value_info(x1, TensorProto.FLOAT, [dim, 8])]
    nodes, inits, value_info = [helper.make_node("Add", [x0, x1], [name(0, "v")], name=name(0, "n"))], [], []
    current = name(0, "v")
    ops = ("Add", "Mul", "Relu")
    for i in range(1, len(names) * 2):
        op = ops[i % len(ops)]
        out = name(i, "v")
        if op == "Relu":
            ins = [current]
        else:
            w = name(i, "w")
            inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, (8,)).astype(np.float32), w))
            ins = [current, w]
        node = helper.make_node(op, ins, [out], name=name(i, "n"), doc_string=names[i % len(names)])
        scopes = repr(["", names[i % len(names)], "[" * 50, op.lower()])
        node.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=scopes)
        nodes.append(node)
        value_info.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [dim, 8]))
        current = out
    mid = nodes[len(nodes) // 2].output[0]
    outputs = [helper.make_tensor_value_info(current, TensorProto.FLOAT, [dim, 8]),
               helper.make_tensor_value_info(mid, TensorProto.FLOAT, [dim, 8])]
    value_info = [v for v in value_info if v.name not in (current, mid)]
    graph = helper.make_graph(nodes, names[0], inputs, outputs, inits, doc_string=names[2], value_info=value_info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name=names[5])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def hostile_op_type_onnx(path: str, canary: str) -> str:
    """Payloads as op types and domains: no runtime knows them, so every target fails — in one line each."""
    import onnx
    from onnx import TensorProto, helper
    names = payloads(canary)
    nodes = [helper.make_node("Relu", ["x"], ["y0"], name="relu")]
    for i, p in enumerate(names[:6]):
        nodes.append(helper.make_node(p, [f"y{i}"], [f"y{i + 1}"], name=f"op{i}", domain=_domain(i, p)))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info(f"y{len(nodes) - 1}", TensorProto.FLOAT, [1, 8])])
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in
                                                 dict.fromkeys(_domain(i, p) for i, p in enumerate(names[:6]))]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    onnx.save(model, path)
    return path


def _domain(i: int, payload: str) -> str:
    # onnx.checker refuses unknown ops in the default domain, so they sit in custom ones (some hostile themselves)
    return payload if i % 2 else "com.example.hostile"


def hostile_module_names(canary: str, quotes: bool = True) -> list[str]:
    """Payloads torch.nn accepts as submodule names (no dots, not empty); with `quotes` False only those xc's .pt2
    reader lets through (at most 200 characters, no quotes, backslashes, control characters or letters that NFKC
    normalisation turns into others)."""
    import re
    import unicodedata
    return [p for p in payloads(canary) if "." not in p and p
            and (quotes or (len(p) <= 200 and not re.search(r"[\"'\\\x00-\x1f\x7f]", p)
                            and unicodedata.normalize("NFKC", p) == p))]


def hostile_torch_module(names: list[str]):
    """(an nn.Module whose submodules and parameters carry `names`, example args); two outputs."""
    import torch
    from torch import nn

    class Hostile(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.names = list(names)
            for i, n in enumerate(self.names):
                self.add_module(n, nn.Linear(8, 8))
                self.register_parameter(f"p{i}{n}", nn.Parameter(torch.rand(8) + 0.5))

        def forward(self, x):
            for i, n in enumerate(self.names):
                x = torch.relu(getattr(self, n)(x)) * getattr(self, f"p{i}{n}")
            return x, x.sum(-1)

    return Hostile().eval(), (torch.randn(2, 8),)
