"""The gradebook an LMS imports: ``gradebook.csv`` (Canvas, as it is) and ``gradebook-moodle.csv``.

A **roster** (``--roster roster.csv``) maps each graded folder to a student of the LMS. Its header names
its columns (case and surrounding spaces do not matter; any other column is ignored):

- ``Submission`` (required): the student's folder under the graded folder (the name ``batch`` was
  given, without ``.zip``);
- ``Student`` (required): the student's name as the LMS shows it;
- ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section`` (optional): copied as they are. Canvas matches
  a row by ``ID`` (its user id), then ``SIS User ID``, then ``SIS Login ID``, then the name.

These are the columns of Canvas's own gradebook export, so that export with a ``Submission`` column
added is a roster (its ``Points Possible`` row is skipped).

``gradebook.csv`` has Canvas's import layout: ``Student, ID, SIS User ID, SIS Login ID, Section``, then
one column per lab (its points), and a ``Points Possible`` row giving each lab's maximum (Canvas sets a
new assignment's points from it). Canvas reads the header as its importer does (Instructure's
``lib/gradebook_importer.rb``): a first column containing ``Student``, a second containing ``ID``, the
SIS columns, ``Section`` last; every column after it is an assignment, matched by ``Title (id)``, then
by title, else created. So nothing else may follow ``Section``: no totals, no flags.

Nobody is dropped: roster students the class lacks keep a row with empty cells, graded students the
roster lacks get a row under their folder name with empty ids (Canvas's import then asks which student
each is), and both are listed in the report. A lab whose grading was not the student's doing
(``grader-error``, ``unavailable``, ``not-run``, no summary) is left empty, never 0, and listed. An
empty cell is "no grade": where Canvas already holds a grade, the importer counts it as a change, and
Canvas lists every change for review before it applies any.

``gradebook-moodle.csv`` is the same table for Moodle's CSV grade import, which maps one identifier
column to a user field (``SIS Login ID`` to *username* or *email address*) and each lab column to a
grade item. Moodle (``grade/import/csv/classes/load_data.php``) stops the whole import at a row whose
identifier matches nobody, credits a row whose identifier is empty to the row before it, and imports
an empty cell as "no grade", replacing a grade already there. So this file has no ``Points Possible``
row and only the students with a ``SIS Login ID`` and a grade in every lab; the others are listed.
"""

from __future__ import annotations

import csv
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.scoring.results import GRADER_FAULTS, SubmissionResult

CANVAS_FILE, MOODLE_FILE = "gradebook.csv", "gradebook-moodle.csv"
#: Canvas's student columns, in its import order.
STUDENT_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
SUBMISSION = "Submission"
POINTS_POSSIBLE = "Points Possible"
#: The column Moodle's import maps to a user (its rows must all have one).
MOODLE_ID = "SIS Login ID"
#: Lab statuses whose score is not the student's doing: the cell is left empty.
NOT_THEIR_DOING = frozenset({*GRADER_FAULTS, "not-run", "missing"})
#: The report's words for each list of students the gradebook could not treat as usual.
LISTS = ("not_in_roster", "not_in_class", "left_blank", "pending_gpu", "not_in_moodle")
FORMATS = (
    "gradebook.csv imports into Canvas as it is (Grades > Import). gradebook-moodle.csv is the same "
    "table for Moodle (Grades > Import > CSV file): map 'SIS Login ID' to username or email address "
    "and each lab column to its grade item."
)
HINT = (
    "No gradebook: pass --roster roster.csv (columns Submission, Student and optionally ID, SIS User ID, "
    "SIS Login ID, Section) to write gradebook.csv for Canvas and gradebook-moodle.csv for Moodle."
)


class RosterError(ValueError):
    """The roster cannot be used (missing file or column, a submission or id listed twice)."""


@dataclass(frozen=True)
class RosterEntry:
    submission: str
    student: str
    ids: dict[str, str]  # ID, SIS User ID, SIS Login ID, Section -> value ("" when absent)


def read_roster(path: Path) -> list[RosterEntry]:
    """The roster's students, in its order.

    Raises:
        RosterError: no such file, no ``Submission`` or ``Student`` column, an empty ``Submission``,
            a submission listed twice, or one ``ID``/``SIS User ID``/``SIS Login ID`` given to two students.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise RosterError(f"cannot read the roster {path}: {error.strerror or error}") from None
    reader = csv.DictReader(text.splitlines())
    columns = {name.strip().casefold(): name for name in reader.fieldnames or []}
    wanted = {name.casefold(): name for name in (SUBMISSION, *STUDENT_COLUMNS)}
    for required in (SUBMISSION, "Student"):
        if required.casefold() not in columns:
            raise RosterError(
                f"{path}: no {required!r} column (its header: {', '.join(reader.fieldnames or []) or 'empty'})"
            )
    entries, seen = [], {}
    for line, row in enumerate(reader, start=2):
        values = {wanted[key]: (row.get(source) or "").strip() for key, source in columns.items() if key in wanted}
        if values["Student"].startswith(POINTS_POSSIBLE) or not any(values.values()):
            continue  # Canvas's export carries a Points Possible row; blank lines mean nothing
        if not values[SUBMISSION]:
            raise RosterError(f"{path}, line {line}: {values['Student'] or 'a student'} has no {SUBMISSION!r}")
        for key in (SUBMISSION, "ID", "SIS User ID", "SIS Login ID"):
            value = values.get(key, "")
            if value and (key, value) in seen:
                raise RosterError(f"{path}, line {line}: {key} {value!r} is already on line {seen[key, value]}")
            seen[key, value] = line
        entries.append(
            RosterEntry(
                unicodedata.normalize("NFC", values[SUBMISSION]),
                values["Student"],
                {key: values.get(key, "") for key in STUDENT_COLUMNS[1:]},
            )
        )
    return entries


def _cell(result: SubmissionResult | None, lab_id: str) -> tuple[Any, str]:
    """(the gradebook cell, why it is empty or partial: "" when it is the lab's grade)."""
    lab = next((lab for lab in result.labs if lab.lab == lab_id), None) if result else None
    if lab is None or lab.status in NOT_THEIR_DOING:
        status = lab.status if lab else "missing"
        return "", f"{lab_id}: {status}{f' ({lab.reason})' if lab and lab.reason else ''}: left empty, not 0"
    return lab.score, f"{lab_id}: {lab.pending} GPU points pending (not in the score)" if lab.pending else ""


def gradebook(
    results: list[SubmissionResult],
    missing: list[str],
    roster: list[RosterEntry],
    assignments: dict[str, str],
    maxima: dict[str, int],
) -> dict[str, Any]:
    """The gradebook's rows and every list of students it could not treat as usual (pure).

    Args:
        results, missing: the class (:func:`grader.report.summary.load_results`).
        roster: :func:`read_roster`'s entries.
        assignments: lab id -> its column's name, in column order.
        maxima: lab id -> its maximum (the ``Points Possible`` row).
    """
    by_name = {unicodedata.normalize("NFC", result.submission): result for result in results}
    missing = [unicodedata.normalize("NFC", folder) for folder in missing]
    graded = sorted({*by_name, *missing})
    listed = {entry.submission for entry in roster}
    rows, lists = [], {key: [] for key in LISTS}

    def add(student: str, ids: dict[str, str], folder: str) -> None:
        row, result = {"Student": student, **ids}, by_name.get(folder)
        if folder in missing:
            lists["left_blank"].append({"student": student, "why": "no readable summary.json: every cell left empty"})
        for lab_id, column in assignments.items():
            row[column], why = _cell(result, lab_id)
            if why and result is not None:
                lists["pending_gpu" if row[column] != "" else "left_blank"].append({"student": student, "why": why})
        rows.append(row)
        if not ids[MOODLE_ID] or "" in (row[column] for column in assignments.values()):
            why = f"no {MOODLE_ID}" if not ids[MOODLE_ID] else "an empty cell (Moodle would import it as no grade)"
            lists["not_in_moodle"].append({"student": student, "why": why})

    for entry in roster:
        if entry.submission not in graded:
            lists["not_in_class"].append(
                {"student": entry.student, "why": f"no graded folder {entry.submission!r}: its cells are empty"}
            )
        add(entry.student, entry.ids, entry.submission)
    for folder in graded:
        if folder not in listed:
            lists["not_in_roster"].append(
                {
                    "student": folder,
                    "why": "a row under the folder's name, without ids (Canvas's import asks who it is)",
                }
            )
            add(folder, {key: "" for key in STUDENT_COLUMNS[1:]}, folder)
    points = {
        "Student": POINTS_POSSIBLE,
        **{key: "" for key in STUDENT_COLUMNS[1:]},
        **{column: maxima.get(lab_id, 0) for lab_id, column in assignments.items()},
    }
    return {
        "columns": [*STUDENT_COLUMNS, *assignments.values()],
        "points_possible": points,
        "rows": rows,
        "moodle_rows": [row for row in rows if row[MOODLE_ID] and all(row[c] != "" for c in assignments.values())],
        **lists,
    }


def write_gradebook(book: dict[str, Any], out: Path) -> None:
    """``gradebook.csv`` (with its ``Points Possible`` row) and ``gradebook-moodle.csv`` into ``out``."""
    for name, rows in ((CANVAS_FILE, [book["points_possible"], *book["rows"]]), (MOODLE_FILE, book["moodle_rows"])):
        write_rows_csv(out / name, book["columns"], rows)


#: First characters that make a spreadsheet read a cell as a formula (OWASP's "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_cell(value: Any) -> Any:
    """``value`` as a CSV cell no spreadsheet runs: a text starting like a formula (a student folder named
    ``=HYPERLINK(...)``) gets a leading ``'``, which Excel, LibreOffice and Google Sheets show as text.
    Numbers are left alone, so scores stay numbers."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def write_rows_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` (dicts keyed by ``columns``) as a CSV file whose every cell is :func:`spreadsheet_cell`."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows({key: spreadsheet_cell(value) for key, value in row.items()} for row in rows)


def assignment_columns(lab_titles: dict[str, str], names: dict[str, str]) -> dict[str, str]:
    """Lab id -> its gradebook column: ``names[lab]`` where given (``--assignment "lab01=Lab 1 (4521)"``:
    Canvas matches ``Title (id)`` to its assignment 4521), else ``<lab id> <title>``.

    Raises:
        RosterError: a name given for a lab the class lacks, or two columns of one name.
    """
    unknown = sorted(set(names) - set(lab_titles))
    if unknown:
        raise RosterError(f"--assignment names {', '.join(unknown)}, not a lab of this class ({', '.join(lab_titles)})")
    columns = {lab_id: names.get(lab_id) or f"{lab_id} {title}" for lab_id, title in lab_titles.items()}
    clash = [name for name in columns.values() if list(columns.values()).count(name) > 1 or name in STUDENT_COLUMNS]
    if clash:
        raise RosterError(f"gradebook column {clash[0]!r} is used twice (or is a student column)")
    return columns
