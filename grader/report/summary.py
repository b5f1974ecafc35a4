"""The class summary: the instructor's view of a graded class (what the ``report`` verb writes).

Reads ``GRADED_DIR/<student>/summary.json`` (what ``batch`` wrote) and writes into ``--out``:

- ``class.csv``: one row per student: total (and its visible / held-out split), then per lab score, max,
  pending points, held-out score and max, status, flags;
- ``class.json``: the same rows plus per-lab statistics, per-test pass rates, talking-point readiness;
- ``class.html``: one self-contained page (:mod:`grader.report.html`): a summary per lab, the student
  table, then per lab a score histogram, the pass rate of every test and talking-point readiness,
  the flagged submissions, the similar submissions and the gradebook;
- ``similarity/<lab>--<a>--<b>.html``: each flagged pair side by side (:mod:`grader.report.similarity`);
- with a roster, ``gradebook.csv`` for Canvas and ``gradebook-moodle.csv`` (:mod:`grader.report.gradebook`).

A student folder without a readable ``summary.json`` still gets a row (status ``missing``).
:func:`class_summary` is pure; reading files, comparing them and drawing charts happen at the edges
(:func:`write_report`).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grader.course.labs import Course, CourseError, load_course
from grader.evidence.layout import SUMMARY_FILE
from grader.report.gradebook import (
    CANVAS_FILE,
    MOODLE_FILE,
    RosterEntry,
    assignment_columns,
    gradebook,
    write_gradebook,
    write_rows_csv,
)  # fmt: skip
from grader.report.gradebook import (
    FORMATS as GRADEBOOK_FORMATS,
)
from grader.report.gradebook import (
    HINT as GRADEBOOK_HINT,
)
from grader.report.gradebook import (
    LISTS as GRADEBOOK_LISTS,
)
from grader.report.html import histogram_png, render_page
from grader.report.similarity import Thresholds, class_similarity
from grader.scoring.results import EVIDENCE_PASSED, EVIDENCE_PENDING, PASSED, SubmissionResult

CSV_FILE, JSON_FILE, HTML_FILE = "class.csv", "class.json", "class.html"
MISSING = "missing"


def load_results(graded: Path) -> tuple[list[SubmissionResult], list[str]]:
    """Every student's result under ``graded``, and the ids whose summary is missing or unreadable."""
    if not graded.is_dir():
        raise FileNotFoundError(f"{graded} is not a graded folder (run `python -m grader batch` first)")
    results, missing = [], []
    # Dot-folders are the tools' own (the Slurm runner's ``.slurm/``), never a student.
    for folder in sorted(path for path in graded.iterdir() if path.is_dir() and not path.name.startswith(".")):
        summary = folder / SUMMARY_FILE
        try:
            results.append(SubmissionResult.from_dict(json.loads(summary.read_text(encoding="utf-8"))))
        except FileNotFoundError:
            if any(folder.iterdir()):
                missing.append(folder.name)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            missing.append(folder.name)  # a folder where summary.json should be, unreadable, malformed: listed
    return results, missing


def student_row(result: SubmissionResult | None, lab_ids: list[str], student: str = "") -> dict[str, Any]:
    """One CSV row: totals, then ``<lab>_score``, ``_max``, ``_pending``, ``_status`` for each lab (and its
    held-out and optional extension points, apart). ``result`` None: ``student``'s folder had no readable
    ``summary.json``; the row has the same columns, zeros and the status ``missing``."""
    empty = {"score": 0, "max_score": 0, "pending": 0}
    total = result.total if result else {**empty, "visible": empty, "heldout": empty, "extension": empty}
    row: dict[str, Any] = {
        "student": result.submission if result else student,
        "score": total["score"],
        "max_score": total["max_score"],
        "pending": total["pending"],
        "visible_score": total["visible"]["score"],
        "heldout_score": total["heldout"]["score"],
        "heldout_max": total["heldout"]["max_score"],
        "extension_score": total["extension"]["score"],
        "extension_max": total["extension"]["max_score"],
    }
    labs = {lab.lab: lab for lab in result.labs} if result else {}
    for lab_id in lab_ids:
        lab = labs.get(lab_id)
        row.update(
            {
                f"{lab_id}_score": lab.score if lab else 0,
                f"{lab_id}_max": lab.max_score if lab else 0,
                f"{lab_id}_pending": lab.pending if lab else 0,
                f"{lab_id}_heldout_score": lab.heldout.score if lab else 0,
                f"{lab_id}_heldout_max": lab.heldout.max_score if lab else 0,
                f"{lab_id}_extension_score": lab.extension.score if lab else 0,
                f"{lab_id}_extension_max": lab.extension.max_score if lab else 0,
                f"{lab_id}_status": lab.status if lab else MISSING,
            }
        )
    row["flags"] = " | ".join(result.flags) if result else "no readable summary.json: grade this submission again"
    return row


def _lab_statistics(results: list[SubmissionResult], lab_id: str) -> dict[str, Any]:
    labs = [lab for result in results for lab in result.labs if lab.lab == lab_id]
    scores = [lab.score for lab in labs]
    tests: dict[str, dict[str, Any]] = {}
    points: dict[str, dict[str, Any]] = {}
    for lab in labs:
        for test in lab.tests:
            entry = tests.setdefault(
                test.nodeid.split("::", 1)[-1],
                {
                    "points": test.max_points,
                    "passed": 0,
                    "pending": 0,
                    "graded": 0,
                    "visibility": test.visibility,
                    "extension": test.extension,
                },
            )
            entry["graded"] += 1
            entry["passed"] += test.outcome == PASSED
            entry["pending"] += test.outcome == "pending"
        for point in lab.talking_points:
            entry = points.setdefault(
                point.id,
                {
                    "kind": point.kind,
                    "text": point.text,
                    "evidence": list(point.evidence),
                    "ready": 0,
                    "pending": 0,
                    "students": 0,
                },
            )
            entry["students"] += 1
            entry["ready"] += point.status == EVIDENCE_PASSED
            entry["pending"] += point.status == EVIDENCE_PENDING
    for entry in tests.values():
        entry["pass_rate"] = round(entry["passed"] / entry["graded"], 4) if entry["graded"] else 0.0
    for entry in points.values():
        entry["ready_rate"] = round(entry["ready"] / entry["students"], 4) if entry["students"] else 0.0
    return {
        "title": labs[0].title if labs else lab_id,
        "max_score": max((lab.max_score for lab in labs), default=0),
        "students": len(labs),
        "mean": round(statistics.fmean(scores), 3) if scores else 0.0,
        "heldout_max_score": max((lab.heldout.max_score for lab in labs), default=0),
        "heldout_mean": round(statistics.fmean(lab.heldout.score for lab in labs), 3) if labs else 0.0,
        "visible_mean": round(statistics.fmean(lab.visible.score for lab in labs), 3) if labs else 0.0,
        # an optional extension step's points: apart, never in max_score or mean
        "extension_max_score": max((lab.extension.max_score for lab in labs), default=0),
        "extension_mean": round(statistics.fmean(lab.extension.score for lab in labs), 3) if labs else 0.0,
        "extension_students": sum(1 for lab in labs if lab.extension.score),
        "median": statistics.median(scores) if scores else 0,
        "min": min(scores, default=0),
        "max": max(scores, default=0),
        # every CPU point earned (GPU points may still be pending)
        "full_marks": sum(1 for lab in labs if lab.max_score and lab.score + lab.pending == lab.max_score),
        "pending_students": sum(1 for lab in labs if lab.pending),
        "pending_points": max((lab.pending for lab in labs), default=0),
        "statuses": dict(Counter(lab.status for lab in labs)),
        "scores": scores,
        "tests": tests,
        "talking_points": points,
    }


def class_summary(results: list[SubmissionResult], missing: list[str] = ()) -> dict[str, Any]:
    """Everything the report shows, as one JSON-ready dict (pure)."""
    lab_ids = list(dict.fromkeys(lab.lab for result in results for lab in result.labs))
    rows = [student_row(result, lab_ids) for result in results]
    rows += [student_row(None, lab_ids, student) for student in missing]
    rows.sort(key=lambda row: row["student"])
    totals = [row["score"] for row in rows]
    return {
        "students": len(rows),
        "lab_ids": lab_ids,
        "total": {
            "mean": round(statistics.fmean(totals), 3) if totals else 0.0,
            "median": statistics.median(totals) if totals else 0,
            "max_score": max((row["max_score"] for row in rows), default=0),
            "full_marks": sum(
                1 for row in rows if row["max_score"] and row["score"] + row["pending"] == row["max_score"]
            ),
        },
        "labs": {lab_id: _lab_statistics(results, lab_id) for lab_id in lab_ids},
        "flagged": [{"student": r.submission, "flags": list(r.flags)} for r in results if r.flags],
        "rows": rows,
    }


def write_csv(summary: dict[str, Any], path: Path) -> None:
    rows = summary["rows"]
    write_rows_csv(path, list(rows[0]) if rows else ["student"], rows)


def gradebook_entry(
    results: list[SubmissionResult],
    missing: list[str],
    summary: dict[str, Any],
    roster: list[RosterEntry] | None,
    columns: dict[str, str],
    out: Path,
) -> dict[str, Any]:
    """Write the LMS gradebook into ``out`` when there is a roster; the report's ``gradebook`` entry."""
    if roster is None:
        return {"written": "", "hint": GRADEBOOK_HINT}
    book = gradebook(
        results, missing, roster, columns, {lab_id: lab["max_score"] for lab_id, lab in summary["labs"].items()}
    )
    write_gradebook(book, out)
    return {
        "written": f"{CANVAS_FILE}, {MOODLE_FILE}",
        "rows": len(book["rows"]),
        "columns": book["columns"],
        "formats": GRADEBOOK_FORMATS,
        **{key: book[key] for key in GRADEBOOK_LISTS},
    }


def write_report(
    graded: Path,
    out: Path,
    *,
    course: Course | None = None,
    roster: list[RosterEntry] | None = None,
    assignments: dict[str, str] | None = None,
    thresholds: Thresholds = Thresholds(),
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Read ``graded``, write ``class.csv``, ``class.json``, ``class.html`` (and the similarity pages, and the
    gradebook when there is a ``roster``) into ``out``.

    Args:
        course: the course whose starter files the similarity check sets aside (default: the installed one).
        roster: :func:`grader.report.gradebook.read_roster`'s entries; None: no gradebook (the report says how).
        assignments: lab id -> its gradebook column name, where not ``<lab id> <title>``.
        log: progress of the similarity check (the longest part).

    Raises:
        FileNotFoundError: ``graded`` is not a folder.
        RosterError: an ``assignments`` entry names no lab of the class.
    """
    results, missing = load_results(graded)
    summary = class_summary(results, missing)
    columns = assignment_columns({lab_id: lab["title"] for lab_id, lab in summary["labs"].items()}, assignments or {})
    out.mkdir(parents=True, exist_ok=True)
    problem = ""
    if course is None:
        try:
            course = load_course()
        except CourseError as error:
            problem = f"the course could not be read ({error}): pass it with --course"
    labs = {lab.lab: lab.package for result in results for lab in result.labs}
    summary["similarity"] = class_similarity(graded, labs, course, out, thresholds, course_problem=problem, log=log)
    summary["gradebook"] = gradebook_entry(results, missing, summary, roster, columns, out)
    write_csv(summary, out / CSV_FILE)
    (out / JSON_FILE).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    histograms = {lab_id: histogram_png(lab_id, lab) for lab_id, lab in summary["labs"].items()}
    (out / HTML_FILE).write_text(render_page(summary, histograms), encoding="utf-8")
    return summary
