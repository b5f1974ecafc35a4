"""Every entry of a submissions folder gets a row: one the grader cannot read is a ``bad-submission``
saying why (never ``grader-error``, never a missing row)."""

from __future__ import annotations

import json
import zipfile

from grader.evidence.layout import FEEDBACK_FILE
from grader.runners.batch import BATCH_FILE, discover_submissions, grade_all, only_options, select_students
from grader.runners.local import grade_submission
from grader.scoring.feedback import write_outputs
from grader.scoring.results import BAD_SUBMISSION, GRADER_ERROR
from grader.scoring.score import GRADER_ERROR_FILE, grader_error_result


def test_every_entry_gets_a_row_and_unreadable_ones_say_why(demo_setup, tmp_path):
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "alice.tar.gz").write_bytes(b"\x1f\x8b\x08 not read")
    (folder / "bob.zip").write_text("a text file named .zip")
    zipfile.ZipFile(folder / "carol.zip", "w").close()
    (folder / "dave.zip").write_bytes((folder / "carol.zip").read_bytes())
    (folder / "dave.tgz").write_bytes(b"\x1f\x8b")  # two entries with one id keep their full names
    (folder / ".DS_Store").write_text("")
    submissions = discover_submissions(folder)
    assert [student for student, _ in submissions] == ["alice", "bob", "carol", "dave.tgz", "dave.zip"]
    rows = grade_all(submissions, tmp_path / "graded", demo_setup, show_progress=False)
    assert {row.student: set(row.statuses.values()) for row in rows} == {
        name: {BAD_SUBMISSION} for name in ("alice", "bob", "carol", "dave.tgz", "dave.zip")
    }
    feedback = (tmp_path / "graded" / "alice" / FEEDBACK_FILE).read_text()
    assert "cannot read .tar.gz archives; submit a folder or a .zip" in feedback
    assert "the zip is empty" in (tmp_path / "graded" / "carol" / FEEDBACK_FILE).read_text()
    assert "not a readable zip" in (tmp_path / "graded" / "bob" / FEEDBACK_FILE).read_text()
    assert len(json.loads((tmp_path / "graded" / BATCH_FILE).read_text())["rows"]) == 5


def _instant_runner(calls: list[str]):
    """A runner that grades nothing: the error result, written where a real one would be."""

    def runner(path, out, setup, student):
        calls.append(student)
        result = grader_error_result(setup.rubric, RuntimeError("not graded in this test"), submission=student)
        write_outputs(result, out)
        return result

    return runner


def test_a_student_of_any_name_gets_a_row_and_the_batch_s_own_files_survive(demo_setup, tmp_path):
    folder = tmp_path / "submissions"
    for name in ("build", "results", "graded", "venv", BATCH_FILE, "bad\x1b[2Jname", "line\nbreak", "__MACOSX"):
        (folder / name).mkdir(parents=True)
    out = folder / "out"  # the output folder inside the submissions folder is no student
    submissions = discover_submissions(folder, out=out)
    ids = [student for student, _ in submissions]
    assert ids == sorted(
        ["build", "results", "graded", "venv", "batch.json-submission", "bad\\x1b[2Jname", "line\\x0abreak"]
    )
    calls: list[str] = []
    rows = grade_all(submissions, out, demo_setup, runner=_instant_runner(calls), show_progress=False)
    assert sorted(calls) == ids and [row.student for row in rows] == ids
    assert [row["student"] for row in json.loads((out / BATCH_FILE).read_text())["rows"]] == ids


def test_a_submission_that_vanishes_during_the_batch_is_the_grader_s_error_not_the_student_s(demo_setup, tmp_path):
    folder = tmp_path / "submissions"
    (folder / "alice").mkdir(parents=True)

    def runner(path, out, setup, student):
        path.rmdir()  # an assistant moves the folder while it is being graded
        return grade_submission(path, out, setup, student)

    [row] = grade_all(discover_submissions(folder), tmp_path / "graded", demo_setup, runner=runner, show_progress=False)
    assert set(row.statuses.values()) == {GRADER_ERROR}
    assert "left the submissions folder" in (tmp_path / "graded" / "alice" / GRADER_ERROR_FILE).read_text()


def test_only_selects_any_id_and_a_regrade_keeps_the_other_rows(demo_setup, tmp_path):
    folder = tmp_path / "submissions"
    for name in ("-dash", "a b", "a,b", "ok"):
        (folder / name).mkdir(parents=True)
    submissions = discover_submissions(folder)
    assert [s for s, _ in select_students(submissions, ["a,b"])] == ["a,b"], "an id with a comma is that id"
    assert [s for s, _ in select_students(submissions, ["-dash,ok", "a b"])] == ["-dash", "a b", "ok"]
    assert only_options(["-dash", "a b"]) == "--only=-dash --only='a b'"
    out = tmp_path / "graded"
    grade_all(submissions, out, demo_setup, runner=_instant_runner([]), show_progress=False)
    grade_all(select_students(submissions, ["ok"]), out, demo_setup, runner=_instant_runner([]),
              show_progress=False, keep_other_rows=True)  # fmt: skip
    assert [row["student"] for row in json.loads((out / BATCH_FILE).read_text())["rows"]] == [
        "-dash",
        "a b",
        "a,b",
        "ok",
    ]


def test_ids_are_composed_unicode_and_short_enough_for_a_folder(tmp_path):
    import unicodedata

    folder = tmp_path / "submissions"
    for name in (unicodedata.normalize("NFD", "José"), "\x01" * 70, "a" * 250, "a" * 249 + "b"):
        (folder / name).mkdir(parents=True)
    ids = [student for student, _ in discover_submissions(folder)]
    assert "José" in ids, "a Mac's decomposed name matches the roster's composed one"
    assert all(len(student.encode()) <= 200 for student in ids) and len(set(ids)) == 4
    for student in ids:
        (tmp_path / "graded" / student).mkdir(parents=True)  # every id is a folder name the filesystem takes


def test_the_report_lists_a_student_whose_summary_cannot_be_read(tmp_path):
    from grader.report.summary import load_results

    (tmp_path / "alice" / "summary.json").mkdir(parents=True)  # a folder where the file should be
    assert load_results(tmp_path) == ([], ["alice"])
