"""JSON Schemas of autotune's files, shipped with the package (docs/reference/log-format.md shows them)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def record_schema() -> dict[str, Any]:
    """The JSON Schema of one log record (one line of a tuning log)."""
    return json.loads(resources.files(__name__).joinpath("record.schema.json").read_text())
