"""The grader's outputs match their published JSON Schemas (``grader/evidence/schemas/``).

Checked on real outputs: every submission of the corpus graded once (good, partial, broken and hostile
ones), and the class report built from them. A field renamed, a new status or an outcome nobody
documented fails here, naming the file and the path inside it.
"""

from __future__ import annotations

import json

import pytest

from grader.evidence.layout import EVENTS_FILE, GRADESCOPE_FILE, RAW_DIR, SUMMARY_FILE
from grader.evidence.schemas import NAMES, load_schema, validator
from grader.report.summary import JSON_FILE, write_report


def _problems(name: str, value, where: str) -> list[str]:
    return [
        f"{where}: {'/'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
        for error in validator(name).iter_errors(value)
    ]


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_is_a_valid_json_schema(name):
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(load_schema(name))


def test_every_graded_submission_matches_the_schemas(graded_corpus):
    problems: list[str] = []
    folders = sorted(path for path in graded_corpus.iterdir() if (path / SUMMARY_FILE).is_file())
    assert len(folders) > 10, "the corpus was graded"
    events = 0
    for folder in folders:
        for schema, file in (("summary", SUMMARY_FILE), ("results", GRADESCOPE_FILE)):
            problems += _problems(schema, json.loads((folder / file).read_text()), f"{folder.name}/{file}")
        for log in sorted((folder / RAW_DIR).rglob(EVENTS_FILE)):
            for number, line in enumerate(log.read_text().splitlines(), 1):
                events += 1
                problems += _problems("events", json.loads(line), f"{log.relative_to(graded_corpus)}:{number}")
    assert events > 100
    assert not problems, "\n".join(problems[:40])


def test_the_class_report_matches_its_schema(graded_corpus, tmp_path):
    write_report(graded_corpus, tmp_path / "report")
    data = json.loads((tmp_path / "report" / JSON_FILE).read_text())
    assert data["students"] > 10
    assert not (problems := _problems("class", data, JSON_FILE)), "\n".join(problems[:40])


def test_a_wrong_output_is_refused():
    """The schemas are strict enough to fail: an unknown status and a missing field are both named."""
    lab = {
        "title": "t",
        "package": "p",
        "score": 0,
        "max_score": 1,
        "pending": 0,
        "status": "great",
        "reason": "",
        "wall_s": 0.0,
        "visible": {"score": 0, "max_score": 1, "pending": 0},
        "heldout": {"score": 0, "max_score": 0, "pending": 0},
        "tests": [],
        "talking_points": [],
    }
    summary = {
        "schema": "grader-summary/1",
        "submission": "x",
        "gpu": "auto",
        "labs": {"labA": lab},
        "total": {"score": 0},
        "flags": [],
        "notes": [],
    }
    problems = "\n".join(_problems("summary", summary, "summary.json"))
    assert "labs/labA/status: 'great' is not one of" in problems
    assert "'extension' is a required property" in problems
