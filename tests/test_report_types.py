"""xc_core/report/types.py: the Report's types name what report.schema.json names, give back every report exactly,
and read an older report with today's fields (upgraded once, in Report.from_dict) and empty defaults.

OLDER_REPORT is the report the code before the architecture step (tests/test_report_identity.py BEFORE_STEP,
b9bc917) wrote for vision-mini on ort-cpu, ort-nnapi, coreml-ane and inductor-cpu, gzipped: made by running
`analyze("sample:vision-mini", [those targets])` from `git archive b9bc917 xc_core`. It lacks what came after
(accelerated, accelerator, declared_precisions, verified points, common_causes)."""
import collections.abc
import copy
import dataclasses
import gzip
import json
import os
import typing

import pytest

from xc_core.report import types
from xc_core.report.schema import schema
from xc_core.report.types import Block, Report, TargetBlock

HERE = os.path.dirname(os.path.abspath(__file__))
OLDER_REPORT = os.path.join(HERE, "older_report_b9bc917_vision-mini.json.gz")
SAMPLES = ("vision-mini", "tts-mini", "transformer-mini")

# Fields the types name that report.schema.json does not describe yet, by type (none today). A field added to a
# type goes in the schema too; the test fails on a typed field the schema lacks unless it is listed here, and on a
# listed field the schema now names.
NOT_IN_SCHEMA_YET: dict[str, set[str]] = {}


# ---- (a) the types and the schema name the same fields -------------------------------------------------------------
def _resolve(node: dict) -> dict:
    while "$ref" in node:
        node = schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def _object_alternatives(node: dict | None) -> list[dict]:
    """The object schemas a value may be (null and scalar alternatives of a oneOf left out)."""
    if node is None:
        return []
    node = _resolve(node)
    if "oneOf" in node:
        return [alt for n in node["oneOf"] for alt in _object_alternatives(n)]
    return [node] if node.get("type", "object") == "object" and node.get("type") != "null" else []


def _names(alternatives: list[dict]) -> set[str]:
    """The field names the schema gives an object: its properties and its required keys, over its alternatives."""
    return {k for alt in alternatives for k in (*alt.get("properties", {}), *alt.get("required", []))}


def _parts(tp, node: dict | None):
    """(Block type, the schema alternatives of its values) for a field of type `tp` described by `node` (None: the
    schema does not describe it), through tuples (array items) and mappings (additionalProperties)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, Block):
        yield tp, _object_alternatives(node)
    elif origin is tuple:
        items = [_resolve(a).get("items") for a in ([_resolve(node)] if node else [])]
        yield from _parts(args[0], items[0] if items else None)
    elif origin is collections.abc.Mapping and args:
        values = [a.get("additionalProperties") for a in _object_alternatives(node)]
        value = next((v for v in values if isinstance(v, dict)), None)
        yield from _parts(args[1], value)


def _walk(cls, alternatives: list[dict], seen: dict) -> None:
    seen.setdefault(cls.__name__, set()).update(_names(alternatives))
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in ("extra", "key_order", "null"):
            continue
        node = next((alt["properties"][f.name] for alt in alternatives if f.name in alt.get("properties", {})), None)
        for part, part_alternatives in _parts(hints[f.name], node):
            if part.__name__ not in seen or part_alternatives:
                _walk(part, part_alternatives, seen)


def _typed_fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} - {"extra", "key_order", "null"}


def test_the_types_name_every_field_the_schema_names():
    described: dict[str, set[str]] = {}
    _walk(Report, [schema()], described)
    for name, schema_fields in described.items():
        cls = getattr(types, name)
        missing = schema_fields - _typed_fields(cls)
        assert not missing, f"{name} lacks the schema's fields {sorted(missing)}"


def test_every_typed_field_is_in_the_schema_or_listed_as_not_yet():
    described: dict[str, set[str]] = {}
    _walk(Report, [schema()], described)
    blocks = {name for name, v in vars(types).items()
              if isinstance(v, type) and issubclass(v, Block) and v is not Block}
    assert set(described) == blocks, "every Block type is reached from Report"
    assert set(NOT_IN_SCHEMA_YET) <= blocks
    for name, schema_fields in described.items():
        undescribed = _typed_fields(getattr(types, name)) - schema_fields
        assert undescribed == NOT_IN_SCHEMA_YET.get(name, set()), (
            f"{name}: fields the schema does not name {sorted(undescribed)}, listed "
            f"{sorted(NOT_IN_SCHEMA_YET.get(name, ()))}"
            " (a new field goes in the schema; one the schema now names leaves the list)")


# ---- (b) the round trip --------------------------------------------------------------------------------------------
@pytest.mark.slow       # an analysis of every target per sample (shared with test_read_back_conformance.py)
@pytest.mark.parametrize("sample", SAMPLES)
def test_every_target_s_report_comes_back_exactly(sample_report, sample):
    from xc_core.targets import target_ids
    report, _ = sample_report(sample, tuple(target_ids()))      # shared with test_read_back_conformance.py
    on_disk = json.loads(json.dumps(report))
    typed = Report.from_dict(on_disk)
    assert set(typed.targets) == set(target_ids())
    assert typed.to_dict() == on_disk
    # Key order too: report.json written from the Report reads as the same bytes.
    assert json.dumps(typed.to_dict()) == json.dumps(on_disk)
    assert all(isinstance(t, TargetBlock) and t.id for t in typed.targets.values())


def _older() -> dict:
    with gzip.open(OLDER_REPORT, "rt") as f:
        return json.load(f)


def test_an_older_report_comes_back_with_only_the_upgraded_fields_added():
    older = _older()
    kept = copy.deepcopy(older)
    upgraded = Report.from_dict(older).to_dict()
    assert older == kept, "from_dict does not change the dict it reads"
    added = {"accelerated", "accelerator", "declared_precisions"}
    for tid, t in older["targets"].items():
        after = upgraded["targets"][tid]
        assert set(after) - set(t) <= added, tid
        points = (t.get("layer_drift") or {}).get("points") or []
        assert [{**p, "verified": True} for p in points] == ((after.get("layer_drift") or {}).get("points") or [])
        same = {k: v for k, v in after.items() if k not in added and k != "layer_drift"}
        assert same == {k: v for k, v in t.items() if k not in added and k != "layer_drift"}, tid
    assert {k: v for k, v in upgraded.items() if k != "targets"} == {k: v for k, v in older.items() if k != "targets"}
    # Upgraded once: today's report it makes comes back exactly.
    assert Report.from_dict(upgraded).to_dict() == upgraded


# ---- (c) an older report reads with today's fields and empty defaults ----------------------------------------------
def test_an_older_report_reads_with_today_s_fields():
    typed = Report.from_dict(_older(), common_causes_of=lambda r: [{"cause": "c", "owner": "source", "fix": "f",
                                                                     "targets": ["ort-cpu"], "reference_failed": False,
                                                                     "evidence": "reported"}])
    # accelerated / accelerator from the boundaries every accelerated target recorded (views/target_counts.py).
    assert typed.targets["ort-nnapi"].accelerated and typed.targets["ort-nnapi"].accelerator == "an accelerator"
    assert typed.targets["coreml-ane"].accelerated
    assert not typed.targets["ort-cpu"].accelerated and typed.targets["ort-cpu"].accelerator is None
    assert typed.targets["ort-cpu"].declared_precisions == ()
    points = typed.targets["ort-cpu"].layer_drift.points
    assert points and all(p.verified for p in points)
    # common_causes: computed on read by the layer that can (analysis/common_cause.py), once.
    assert [c.targets for c in typed.common_causes] == [("ort-cpu",)]
    assert typed.to_dict()["common_causes"][0]["cause"] == "c"


def test_a_target_that_did_not_compile_asks_the_registry_for_its_accelerator():
    older = _older()
    failed = {k: v for k, v in older["targets"]["ort-nnapi"].items() if k != "info"}
    older["targets"] = {"ort-nnapi": {**failed, "graph": None, "status": "error"}}
    assert not Report.from_dict(older).targets["ort-nnapi"].accelerated, "without the registry: as recorded"
    typed = Report.from_dict(older, accelerator_for=lambda identity: "NNAPI" if identity == "ort-nnapi" else None)
    assert typed.targets["ort-nnapi"].accelerated and typed.targets["ort-nnapi"].accelerator == "NNAPI"


def test_absent_and_null_blocks_read_empty_and_come_back_as_they_were():
    minimal = {"schema_version": "1.0", "targets": {"t": {"id": "t", "status": "error", "drift": None,
                                                          "accelerated": False, "declared_precisions": [],
                                                          "layout": None, "notes": None, "error": None}},
               "capture": None}
    typed = Report.from_dict(minimal)
    t = typed.targets["t"]
    # Empty, falsy defaults: no `(x or {}).get` in a reader.
    assert not t.drift and t.drift.outputs == {} and t.drift.reference is None
    assert not t.layer_drift and t.layer_drift.points == () and not t.layer_drift.attribution
    assert not t.info.partitioning and t.info.partitioning.runtime_count.on_accelerator == 0
    assert not t.info.boundaries and t.info.boundaries.items == ()
    assert not t.fusions and t.fusions.groups == () and not t.node_times and t.advice.workaround is None
    assert t.layout == {} and t.notes == () and t.error is None
    assert not typed.capture and typed.capture.graph.nodes == () and not typed.capture.onnx_route
    assert not typed.reference and typed.reference.outputs == {}
    assert typed.common_causes == () and typed.checklist.targets == {} and typed.run.cell_keys == {}
    assert typed.to_dict() == minimal
    assert json.dumps(typed.to_dict()) == json.dumps(minimal), "in the order read"
    assert Report.from_dict(None).to_dict() is None


def test_a_block_made_in_code_writes_every_field():
    assert types.Advice(owner="xc", workaround="report it").to_dict() == {
        "owner": "xc", "who": None, "node": None, "op": None, "workaround": "report it"}
    assert bool(types.Advice(owner="xc")) and not types.Advice(null=True)


def test_free_keys_and_values_of_an_unexpected_shape_are_kept():
    report = {"targets": {"t": {"id": "t", "accelerated": False, "declared_precisions": [],
                                "info": {"onnxruntime_version": "1.20", "partitioning": {"num_partitions": 2}},
                                "notes": "one note, not a list", "a_future_field": {"x": 1}}}}
    # A non-finite output beside a non-finite reference has no `implausible` today too: read as stored.
    report["targets"]["u"] = {"id": "u", "accelerated": False, "declared_precisions": [],
                              "drift": {"reference": "torch", "outputs": {"o": {"finite": False, "rel_l2": None}}}}
    typed = Report.from_dict(report)
    assert typed.targets["u"].drift.outputs["o"].implausible is None
    info = typed.targets["t"].info
    assert info.extra == {"onnxruntime_version": "1.20"} and info.partitioning.num_partitions == 2
    assert typed.targets["t"].notes == () and typed.targets["t"].extra["a_future_field"] == {"x": 1}
    assert typed.to_dict() == report


def test_the_types_are_frozen():
    typed = Report.from_dict(_older())
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.targets["ort-cpu"].status = "ok"
