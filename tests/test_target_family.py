"""A family owns its words: a target's options come from its Options dataclass (choices, defaults, help), and the
install hints name the pins requirements.txt holds."""
import dataclasses
import os
import typing

import pytest

from xc_core.errors import XcInputError
from xc_core.targets import REGISTRY, make_target, parse_target_spec, shipped_together
from xc_core.targets.options import CHOICE, option_specs
from xc_core.targets.pins import REQUIREMENTS, install_hint, pin, read_pins


@pytest.mark.parametrize("tid", sorted(REGISTRY))
def test_each_options_choices_are_the_dataclass_literal(tid):
    cls = REGISTRY[tid]
    hints = typing.get_type_hints(cls.Options)
    for spec, f in zip(cls.option_specs(), dataclasses.fields(cls.Options)):
        assert spec.name == f.name and spec.help == f.metadata["help"] and spec.default == f.default
        literal = [a for a in typing.get_args(hints[f.name]) if typing.get_origin(a) is typing.Literal] or \
            ([hints[f.name]] if typing.get_origin(hints[f.name]) is typing.Literal else [])
        if literal:
            assert spec.kind == CHOICE and spec.choices == typing.get_args(literal[0])
        for choice in spec.choices:     # every choice makes a variant whose identity names it
            assert make_target(tid, **{f.name: choice}).identity == f"{tid}[{f.name}={choice}]"


def test_identity_and_parsing_stay_as_before():
    assert make_target("ort-nnapi[fp16=true,bandwidth_gb_s=8]").identity == "ort-nnapi[bandwidth_gb_s=8,fp16=True]"
    assert parse_target_spec("ort-nnapi[transition_overhead_ms=0.5]") == ("ort-nnapi",
                                                                          {"transition_overhead_ms": 0.5})
    with pytest.raises(XcInputError, match="bandwidth_gb_s=fast is not a number"):
        parse_target_spec("ort-nnapi[bandwidth_gb_s=fast]")


def test_defaults_are_each_targets_own():
    assert make_target("ort-nnapi").settings.fp16 is False and make_target("ort-coreml").settings.fp16 is True
    assert make_target("coreml-cpu").compute_precision == "fp32" and make_target("coreml-ane").compute_units == "ALL"
    assert make_target("openvino-cpu[precision=bf16]").settings.inference_precision == "bf16"
    assert option_specs(REGISTRY["openvino-cpu"].Options)[0].aliases == ("precision",)


def test_a_shipped_pair_names_registered_targets_once():
    """Each side a registered target or one of its variants, written as its identity (the int8 XNNPACK program
    beside the Ethos-U: executorch-xnnpack[quantize=int8]), and each pair once."""
    from xc_core.targets import make_target
    pairs = shipped_together()
    assert all(make_target(x).identity == x and x.split("[")[0] in REGISTRY for a, b in pairs for x in (a, b))
    assert len({frozenset(p) for p in pairs}) == len(pairs)


def test_install_hints_name_the_pin_requirements_txt_holds():
    with open(REQUIREMENTS, encoding="utf-8") as fh:
        pinned = read_pins(fh)
    for dist in ("executorch", "ai-edge-litert", "litert-torch", "coreai-torch", "coreai-core"):
        assert pin(dist) == pinned[dist]
        assert install_hint(dist) == f"pip install {dist}=={pinned[dist]}"
    assert read_pins(["# x==1", "a_b.C==2.0 ; python_version>'3'", "d>=3"]) == {"a-b-c": "2.0"}
    assert install_hint("not-a-dependency") == "pip install not-a-dependency"
    assert os.path.basename(REQUIREMENTS) == "requirements.txt"


@pytest.mark.parametrize("spec, words", [
    ("ort-nnapi[bandwidth_gb_s=nan]", "not a finite number"),
    ("ort-nnapi[bandwidth_gb_s=1e999]", "not a finite number"),
    ("ort-nnapi[bandwidth_gb_s=0]", "a number above 0"),
    ("litert-xnnpack[transition_overhead_ms=-1]", "a number of at least 0"),
    ("ort-cpu[level=ba\nsic]", "is not accepted"),
    ('ort-cpu[level=basic")]', "is not accepted"),
    ("ort-cpu[lev\rel=basic]", "takes no option"),
])
def test_a_bad_option_value_is_one_line_naming_what_is_accepted(spec, words):
    # a number the boundary estimate cannot use (nan, inf, a zero bandwidth) and text with line breaks or quotes
    from xc_core.errors import XcInputError
    from xc_core.targets import parse_target_list
    with pytest.raises(XcInputError) as e:
        parse_target_list(spec)
    assert words in str(e.value) and "\n" not in str(e.value) and "\r" not in str(e.value)
