"""JSON Schemas of what the grader writes, checked against real outputs by ``grader/tests/test_output_schemas.py``.

======================  ==========================================================
``summary.schema.json`` ``<graded>/<student>/summary.json`` (instructor data)
``results.schema.json`` ``<graded>/<student>/results.json`` (Gradescope's format)
``events.schema.json``  each line of ``<graded>/<student>/raw/<lab>/events.jsonl``
``class.schema.json``   ``<report>/class.json`` (``grader report``)
======================  ==========================================================
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent
NAMES = ("summary", "results", "events", "class")


def load_schema(name: str) -> dict[str, Any]:
    """The schema called ``name`` (one of :data:`NAMES`)."""
    return json.loads((FOLDER / f"{name}.schema.json").read_text(encoding="utf-8"))


def validator(name: str):
    """A ``jsonschema`` validator for ``name``, resolving references between the course's schemas."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    registry = Registry().with_resources(
        (f"{other}.schema.json", Resource.from_contents(load_schema(other))) for other in NAMES
    )
    return Draft202012Validator(load_schema(name), registry=registry)
