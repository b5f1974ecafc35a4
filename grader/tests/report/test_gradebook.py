"""The gradebook an LMS imports: Canvas's layout, a roster, and nobody dropped."""

from __future__ import annotations

import csv
import html
import re

import pytest

from grader.__main__ import main
from grader.report.gradebook import CANVAS_FILE, MOODLE_FILE, RosterError, read_roster
from grader.scoring.results import GRADER_ERROR
from grader.tests.report.graded_folders import lab, write_graded

ROSTER = """Submission,Student,ID,SIS User ID,SIS Login ID,Section
alice,"Liddell, Alice",101,S-1,alice@uni.example,Tue lab
bob,"Builder, Bob",102,S-2,,Tue lab
dora,"Explorer, Dora",103,S-4,dora@uni.example,Thu lab
"""


def read_rows(path) -> list[list[str]]:
    return list(csv.reader(path.read_text(encoding="utf-8").splitlines()))


def canvas_reads(rows: list[list[str]]) -> dict:
    """What Canvas's gradebook importer makes of ``rows``, by its own rules (Instructure's
    ``lib/gradebook_importer.rb``: ``row_has_student_headers?``, ``update_column_count``, ``header?``,
    ``strip_non_assignment_columns``, ``check_for_non_student_row``, ``process_student``)."""
    header = rows[0]
    assert len(header) > 3 and "Student" in header[0] and "ID" in header[1], "not a gradebook header"
    student_columns = 3
    if re.search(r"SIS\s+Login\s+ID", header[2]):
        student_columns += 1
    elif re.search(r"SIS\s+User\s+ID", header[2]) and re.search(r"SIS\s+Login\s+ID", header[3]):
        student_columns += 2
    assert "Section" in header[student_columns - 1], "the last student column must be Section"
    non_assignment = re.compile(
        "Current Score|Current Points|Current Grade|Final Score|Final Points|Final Grade|"
        "Override Score|Override Grade|Override Status"
    )
    assignments = [name for name in header[student_columns:] if not non_assignment.search(name)]
    points, students = {}, []
    for row in rows[1:]:
        if "Points Possible" in row[0]:
            points = dict(zip(header[student_columns:], row[student_columns:]))
            continue
        key = row[1] or (header[2] == "SIS User ID" and row[2]) or row[3] or row[0]  # id, SIS ids, then the name
        students.append((key, dict(zip(header[student_columns:], row[student_columns:]))))
    return {"assignments": assignments, "points": points, "students": students}


@pytest.fixture
def graded(tmp_path):
    """alice, bob (a grader error in lab02, GPU points pending in lab01) and carol, who is not in the roster."""
    folder = tmp_path / "graded"
    write_graded(folder, "alice", [lab("lab01", 7, title="FX passes"), lab("lab02", 9, 12, title="NPU backend")])
    write_graded(
        folder,
        "bob",
        [lab("lab01", 4, pending=3, title="FX passes"), lab("lab02", 0, 12, status=GRADER_ERROR, title="NPU backend")],
    )
    write_graded(folder, "carol", [lab("lab01", 10, title="FX passes"), lab("lab02", 12, 12, title="NPU backend")])
    return folder


def report(tmp_path, graded, *extra: str) -> int:
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    return main(
        ["report", str(graded), "--out", str(tmp_path / "report"), "--roster", str(tmp_path / "roster.csv"), *extra]
    )


def test_canvas_reads_the_columns_the_points_and_every_student(tmp_path, graded):
    assert report(tmp_path, graded) == 0
    rows = read_rows(tmp_path / "report" / CANVAS_FILE)
    assert rows[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        "lab01 FX passes",
        "lab02 NPU backend",
    ]
    read = canvas_reads(rows)
    assert read["assignments"] == ["lab01 FX passes", "lab02 NPU backend"]
    assert read["points"] == {"lab01 FX passes": "10", "lab02 NPU backend": "12"}
    assert read["students"] == [
        ("101", {"lab01 FX passes": "7", "lab02 NPU backend": "9"}),
        ("102", {"lab01 FX passes": "4", "lab02 NPU backend": ""}),  # grader error: left empty, never 0
        ("103", {"lab01 FX passes": "", "lab02 NPU backend": ""}),  # dora: in the roster, not graded
        ("carol", {"lab01 FX passes": "10", "lab02 NPU backend": "12"}),  # graded, not in the roster: by name
    ]


def test_every_student_missing_from_the_roster_or_the_class_is_listed(tmp_path, graded, capsys):
    assert report(tmp_path, graded) == 0
    printed = capsys.readouterr().out
    assert "not in roster: carol" in printed and "not in class: Explorer, Dora" in printed
    assert "left blank: Builder, Bob: lab02: grader-error" in printed
    page = (tmp_path / "report" / "class.html").read_text()
    gradebook = html.unescape(re.sub(r"<[^>]+>", " ", page[page.index("id='gradebook'") :]))
    for heading, student in (
        ("Graded, not in the roster (1)", "carol"),
        ("In the roster, not graded (1)", "Explorer, Dora"),
        ("Cells left empty (not 0) (1)", "Builder, Bob"),
        ("Scores without their pending GPU points (1)", "Builder, Bob"),
    ):
        assert heading in gradebook and student in gradebook[gradebook.index(heading) :]


def test_the_moodle_file_has_no_points_row_and_only_students_with_a_login(tmp_path, graded):
    assert report(tmp_path, graded) == 0
    rows = read_rows(tmp_path / "report" / MOODLE_FILE)
    assert rows[0] == read_rows(tmp_path / "report" / CANVAS_FILE)[0]
    # Moodle maps one column to its users, stops at a value it cannot match, gives a row with an empty
    # value to the row before and reads an empty cell as "no grade": so every row has a SIS Login ID and
    # every grade (dora, not graded, is left out), and there is no Points Possible row.
    assert rows[1:] == [["Liddell, Alice", "101", "S-1", "alice@uni.example", "Tue lab", "7", "9"]]


def test_a_lab_column_can_name_its_canvas_assignment(tmp_path, graded):
    assert report(tmp_path, graded, "--assignment", "lab01=Lab 1 (4521)") == 0
    assert read_rows(tmp_path / "report" / CANVAS_FILE)[0][5:] == ["Lab 1 (4521)", "lab02 NPU backend"]
    assert report(tmp_path, graded, "--assignment", "lab09=Lab 9", "--out", str(tmp_path / "other")) == 2
    assert not (tmp_path / "other").exists()


def test_canvas_s_own_export_with_a_submission_column_is_a_roster(tmp_path):
    export = (
        "\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,Lab 1 (4521),Current Score, submission \n"
        "    Points Possible,,,,,10,,\n"
        '"Liddell, Alice",101,S-1,alice@uni.example,Tue lab,,,alice\n'
    )
    (tmp_path / "export.csv").write_text(export, encoding="utf-8")
    (entry,) = read_roster(tmp_path / "export.csv")
    assert (entry.submission, entry.student, entry.ids["ID"], entry.ids["Section"]) == (
        "alice",
        "Liddell, Alice",
        "101",
        "Tue lab",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Student,ID\nAlice,1\n", "no 'Submission' column"),
        ("Submission,Student\nalice,Alice\nalice,Alicia\n", "line 3: Submission 'alice' is already on line 2"),
        (
            "Submission,Student,SIS Login ID\nalice,Alice,a@x\nbob,Bob,a@x\n",
            "line 3: SIS Login ID 'a@x' is already on line 2",
        ),
        ("Submission,Student\n,Alice\n", "line 2: Alice has no 'Submission'"),
    ],
)
def test_a_roster_that_cannot_be_used_is_refused_saying_why(tmp_path, graded, capsys, text, message):
    (tmp_path / "roster.csv").write_text(text, encoding="utf-8")
    with pytest.raises(RosterError, match=re.escape(message)):
        read_roster(tmp_path / "roster.csv")
    assert (
        main(["report", str(graded), "--out", str(tmp_path / "report"), "--roster", str(tmp_path / "roster.csv")]) == 2
    )
    assert message in capsys.readouterr().err
    assert not (tmp_path / "report").exists(), "nothing is written from a bad roster"


def test_without_a_roster_there_is_no_gradebook_and_the_report_says_how_to_get_one(tmp_path, graded, capsys):
    assert main(["report", str(graded), "--out", str(tmp_path / "report")]) == 0
    assert not (tmp_path / "report" / CANVAS_FILE).exists()
    assert "gradebook: No gradebook: pass --roster roster.csv" in capsys.readouterr().out
    assert "pass --roster roster.csv" in (tmp_path / "report" / "class.html").read_text()


def test_a_name_that_reads_as_a_formula_is_text_in_every_csv(tmp_path):
    from grader.report.gradebook import spreadsheet_cell, write_rows_csv

    rows = [{"student": '=HYPERLINK("http://x","y")', "score": 12}, {"student": "@SUM(A1)", "score": -3}]
    write_rows_csv(tmp_path / "class.csv", ["student", "score"], rows)
    lines = (tmp_path / "class.csv").read_text().splitlines()
    assert lines[1] == '"\'=HYPERLINK(""http://x"",""y"")",12' and lines[2] == "'@SUM(A1),-3"
    assert [spreadsheet_cell(v) for v in ("-1", "+x", "\tx", "alice", 5)] == ["'-1", "'+x", "'\tx", "alice", 5]


def test_a_roster_name_matches_a_folder_whatever_its_unicode_form(tmp_path):
    import unicodedata

    from grader.report.gradebook import read_roster

    roster = tmp_path / "roster.csv"
    roster.write_text(f"Student,Submission\nJosé Pérez,{unicodedata.normalize('NFD', 'José')}\n", encoding="utf-8")
    assert [entry.submission for entry in read_roster(roster)] == [unicodedata.normalize("NFC", "José")]
