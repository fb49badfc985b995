"""A target's options, typed: one frozen dataclass per target family, declared on the target class as `Options`.

Each field is an option a user may set (CLI `--option` and `ID[KEY=VALUE]`, the dashboard's variant form):
its type says what it accepts (`typing.Literal` where the set is fixed, `bool`, `float`), its default is the value
the target uses when the option is not set (None: the toolchain's own choice), and `option(...)` keeps the help text
(`xc targets`, the dashboard) and the other names users write for it in the field's metadata. Everything else —
the check of a value, the listing, the variant form, the identity string and its parsing — is derived here.

An identity names only the options a user set, sorted by name (`ort-cpu[level=basic]`): a target's defaults never
enter it, so a report made before an option existed keeps its column.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass

from ..errors import XcInputError, printable_line

CHOICE, NUMBER, TEXT = "choice", "number", "text"


def option(default=None, help: str = "", aliases: tuple[str, ...] = (),  # noqa: A002 — the metadata key's name
           above: float | None = None, at_least: float | None = None):
    """A field of an Options dataclass: its default, what it sets in the toolchain, other names users write; for a
    number, the bound it must keep (`above`: strictly greater, `at_least`: greater or equal)."""
    return dataclasses.field(default=default, metadata={"help": help, "aliases": tuple(aliases), "above": above,
                                                        "at_least": at_least})


@dataclass(frozen=True)
class NoOptions:
    """A target that takes no option."""


@dataclass(frozen=True)
class OptionSpec:
    """One option as the CLI, `xc targets` and the dashboard see it, read off its dataclass field."""
    name: str
    kind: str                      # CHOICE (a fixed set, bool included) | NUMBER | TEXT
    choices: tuple = ()            # the accepted values, in the order they are offered
    default: typing.Any = None     # the value used when it is not set; None: the toolchain's own
    help: str = ""
    aliases: tuple[str, ...] = ()
    above: float | None = None     # a number must be greater than this …
    at_least: float | None = None  # … or at least this


@functools.cache
def option_specs(options_cls: type) -> tuple[OptionSpec, ...]:
    """The options of an Options dataclass, in field order."""
    hints = typing.get_type_hints(options_cls, include_extras=False)
    out = []
    for f in dataclasses.fields(options_cls):
        kind, choices = _kind_of(hints[f.name], f"{options_cls.__name__}.{f.name}")
        out.append(OptionSpec(f.name, kind, choices, f.default, f.metadata.get("help", ""),
                              tuple(f.metadata.get("aliases", ())), f.metadata.get("above"),
                              f.metadata.get("at_least")))
    return tuple(out)


def _kind_of(annotation, where: str) -> tuple[str, tuple]:
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType)     # `X | None`
    args = [a for a in typing.get_args(annotation) if a is not type(None)] if optional else [annotation]
    if len(args) != 1:
        raise TypeError(f"{where}: one type per option (optionally | None), not {annotation}")
    (t,) = args
    if typing.get_origin(t) is typing.Literal:
        return CHOICE, typing.get_args(t)
    if t is bool:
        return CHOICE, (True, False)
    if t in (float, int):
        return NUMBER, ()
    if t is str:
        return TEXT, ()
    raise TypeError(f"{where}: an option is a Literal, bool, float, int or str, not {t}")


def check(options_cls: type, target_id: str, values: dict, where: str) -> dict:
    """The options as the target names them (aliases resolved), each value one it accepts — text from a command
    line or a form is read as the option's type; else an XcInputError of one line."""
    specs = {s.name: s for s in option_specs(options_cls)}
    aliases = {a: s.name for s in specs.values() for a in s.aliases}
    out = {}
    for key, value in values.items():
        key = aliases.get(key, key)
        spec = specs.get(key)
        if spec is None:
            takes = f"it takes {', '.join(specs)}" if specs else "it takes none"
            raise XcInputError(f"{where}: {target_id} takes no option '{printable_line(key)}'; {takes}")
        out[key] = _value_of(spec, value, target_id, where)
    return out


_TRUE, _FALSE = ("true", "on", "yes", "1"), ("false", "off", "no", "0")


def _value_of(spec: OptionSpec, value, target_id: str, where: str):
    said = f"{where}: {target_id} {spec.name}={printable_line(value)}"      # the value as typed, on one line
    if spec.kind == CHOICE:
        text = str(value).strip().lower()
        if spec.choices == (True, False) and isinstance(value, str):
            text = "true" if text in _TRUE else "false" if text in _FALSE else text
        match = next((c for c in spec.choices if str(c).lower() == text), None)
        if match is None:
            raise XcInputError(f"{said} is not accepted; accepted: " + ", ".join(str(c) for c in spec.choices))
        return match
    if spec.kind == NUMBER:
        return _bounded(spec, _number(value, said), said)
    return str(value)


def _number(value, said: str):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    # An integer stays one (bandwidth_gb_s=8, not 8.0): the identity string keeps what the user wrote.
    for cast in (int, float):
        try:
            return cast(str(value).strip())
        except ValueError:
            pass
    raise XcInputError(f"{said} is not a number")


def _bounded(spec: OptionSpec, number, said: str):
    """A number the option can use: finite (nan or inf would make every estimate built on it nan or 0), and within
    its declared bound."""
    if not math.isfinite(number):
        raise XcInputError(f"{said} is not a finite number")
    if spec.above is not None and not number > spec.above:
        raise XcInputError(f"{said} is not accepted; accepted: a number above {spec.above:g}")
    if spec.at_least is not None and not number >= spec.at_least:
        raise XcInputError(f"{said} is not accepted; accepted: a number of at least {spec.at_least:g}")
    return number


def settings_of(options_cls: type, values: dict):
    """The typed options of a target: the values set, the dataclass defaults for the rest."""
    return options_cls(**values)


def identity_of(target_id: str, values: dict) -> str:
    """'ort-cpu' + {'level': 'basic'} → 'ort-cpu[level=basic]': the options set, sorted by name."""
    if not values:
        return target_id
    return target_id + "[" + ",".join(f"{k}={v}" for k, v in sorted(values.items())) + "]"


def split_spec(spec: str) -> tuple[str, dict[str, str]]:
    """'ort-cpu[level=basic]' → ('ort-cpu', {'level': 'basic'}): the id and the options as written (text, not yet
    checked — `check` reads each as its option's type)."""
    spec = spec.strip()
    if "[" not in spec:
        return spec, {}
    if not spec.endswith("]"):
        raise XcInputError(f"target '{printable_line(spec)}': expected ID[KEY=VALUE,...], e.g. ort-cpu[level=basic]")
    tid, body = spec[:-1].split("[", 1)
    opts = {}
    for part in split_list(body):
        if "=" not in part:
            raise XcInputError(f"target '{printable_line(spec)}': option '{printable_line(part)}' is not KEY=VALUE, e.g. ort-cpu[level=basic]")
        key, value = (x.strip() for x in part.split("=", 1))
        opts[key] = value
    return tid.strip(), opts


def split_list(text: str) -> list[str]:
    """'ort-cpu,ort-cpu[level=basic,x=1],coreml-ane' → the three entries: commas inside brackets belong to the
    entry's options."""
    entries, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            entries.append(cur.strip())
            cur = ""
        else:
            cur += ch
    entries.append(cur.strip())
    return [e for e in entries if e]


def with_defaults(options_cls: type, name: str, **defaults) -> type:
    """The same options with other defaults (coreml-cpu computes in fp32 where coreml-ane uses fp16): a frozen
    subclass whose named fields keep their type, help and aliases."""
    hints = typing.get_type_hints(options_cls)
    by_name = {f.name: f for f in dataclasses.fields(options_cls)}
    unknown = set(defaults) - set(by_name)
    if unknown:
        raise TypeError(f"{options_cls.__name__} has no option {', '.join(sorted(unknown))}")
    changed = [(k, hints[k], dataclasses.field(default=v, metadata=by_name[k].metadata)) for k, v in defaults.items()]
    cls = dataclasses.make_dataclass(name, changed, bases=(options_cls,), frozen=True)
    cls.__module__ = options_cls.__module__
    return cls


# The latency-cliff estimate's two inputs, which every target with delegate↔CPU boundaries takes
# (analysis/boundaries.py); the ORT mobile EPs word it for their accelerator (targets/ort_mobile.py).
_BANDWIDTH_HELP = "copy bandwidth at {side}↔CPU boundary, for the latency-cliff estimate (GB/s, default 4)"
_OVERHEAD_HELP = "fixed cost per boundary crossing, for the estimate (ms, default 0.2)"


def bandwidth_option(side: str):
    from ..analysis.boundaries import DEFAULT_BANDWIDTH_GB_S
    return option(DEFAULT_BANDWIDTH_GB_S, help=_BANDWIDTH_HELP.format(side=side), above=0)


def overhead_option():
    from ..analysis.boundaries import DEFAULT_TRANSITION_OVERHEAD_MS
    return option(DEFAULT_TRANSITION_OVERHEAD_MS, help=_OVERHEAD_HELP, at_least=0)


@dataclass(frozen=True)
class DelegateCostOptions:
    """The boundary cost model of a target that hands parts of the graph to a delegate."""
    bandwidth_gb_s: float = bandwidth_option("a delegate")
    transition_overhead_ms: float = overhead_option()
