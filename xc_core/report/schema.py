"""report.json is validated against report.schema.json (kept beside this file) before it is written."""
from __future__ import annotations

import json
import os
from functools import lru_cache

SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "report.schema.json")


@lru_cache(maxsize=1)
def schema() -> dict:
    with open(SCHEMA_PATH) as f:
        return json.load(f)


@lru_cache(maxsize=1)
def _compiled():
    # fastjsonschema compiles the schema to Python once: ~15× faster than jsonschema on a report (0.03 s against
    # 0.4 s for transformer-mini's 1.4 MB, which grows to tens of seconds on a big model's report). The schema
    # uses only $defs, $ref, const and draft-07 keywords, which it implements (it reads it as draft 7).
    import fastjsonschema
    return fastjsonschema.compile(schema())


def validate_report(report: dict) -> None:
    """Raise ValueError (fastjsonschema's JsonSchemaValueException) naming the first part of the report that does
    not match the schema."""
    _compiled()(report)


# A report xc builds has its graph nodes from one typed constructor (xc_core.ir.Node.to_dict): checking the first
# this many of each node list checks that constructor; checking all 20,000 of a big graph's, per target, took 4.3 s
# of a 26 s report job. Reports read back (imports) are validated whole.
BUILT_NODES_CHECKED = 2000


def validate_built_report(report: dict) -> None:
    """validate_report for a report xc has just built: graph node lists longer than BUILT_NODES_CHECKED are checked
    on their first BUILT_NODES_CHECKED nodes, everything else whole."""
    _compiled()(_with_node_lists_cut(report, 0))


def _with_node_lists_cut(value, depth: int):
    """A copy of `value` sharing everything but the dicts on the way to a "nodes" list that is cut."""
    if not isinstance(value, dict) or depth > 4:
        return value
    changed = {}
    for k, v in value.items():
        if k == "nodes" and isinstance(v, list) and len(v) > BUILT_NODES_CHECKED:
            changed[k] = v[:BUILT_NODES_CHECKED]
        elif isinstance(v, dict):
            new = _with_node_lists_cut(v, depth + 1)
            if new is not v:
                changed[k] = new
    return {**value, **changed} if changed else value


def report_problem(report: dict) -> str | None:
    """None for a valid report, else where and why it is not, in jsonschema's words (its best match among every
    error, which reads better than the first one found; computed only for an invalid report)."""
    try:
        validate_report(report)
        return None
    except ValueError:
        pass
    import jsonschema
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema()).iter_errors(report))
    if error is None:          # the two validators disagree: say what the fast one found
        try:
            validate_report(report)
        except ValueError as e:
            return f"(top level): {e}"
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"{where}: {error.message}"
