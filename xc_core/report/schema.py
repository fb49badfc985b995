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


def validate_report(report: dict) -> None:
    """Raise jsonschema.ValidationError when the report does not match the schema."""
    import jsonschema
    jsonschema.validate(report, schema())
