"""Graded folders made by hand, as ``grader batch`` leaves them: a ``summary.json`` per student and,
optionally, the editable files it kept under ``submitted/``."""

from __future__ import annotations

import json
from pathlib import Path

from grader.evidence.layout import SUBMITTED_DIR, SUMMARY_FILE
from grader.scoring.results import LabResult, SubmissionResult


def lab(
    lab_id: str,
    score: int,
    max_score: int = 10,
    *,
    status: str = "graded",
    pending: int = 0,
    package: str = "",
    title: str = "",
) -> LabResult:
    """One lab's result, its tests left out (the report's tables only read the totals)."""
    return LabResult(
        lab_id,
        title or f"Lab {lab_id}",
        package or f"{lab_id}_pkg",
        score,
        max_score,
        pending,
        status,
        reason="" if status == "graded" else f"it was {status}",
    )


def write_graded(graded: Path, student: str, labs: list[LabResult], submitted: dict[str, str] | None = None) -> Path:
    """``graded/<student>/summary.json`` (and ``submitted/<path>`` for each of ``submitted``)."""
    folder = graded / student
    folder.mkdir(parents=True)
    result = SubmissionResult(student, "auto", tuple(labs))
    (folder / SUMMARY_FILE).write_text(json.dumps(result.to_dict()), encoding="utf-8")
    for rel, text in (submitted or {}).items():
        path = folder / SUBMITTED_DIR / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder
