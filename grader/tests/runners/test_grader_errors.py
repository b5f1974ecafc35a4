"""A grader error tells the student only that it happened; its message and traceback, which can name the
grader's folders and held-out files, are the instructor's (``grader-error.txt``)."""

from __future__ import annotations

import errno

import grader.runners.local as local
from grader.evidence.layout import FEEDBACK_FILE, GRADESCOPE_FILE, SUMMARY_FILE
from grader.runners.local import grade_submission
from grader.scoring.score import GRADER_ERROR_FILE
from grader.tests.corpus import starter_copy

SECRET_PATH = "/tmp/grader-abc/sandbox/labA_arith/heldout/test_secret_edge_cases.py"


def test_a_full_disk_names_no_grader_path_to_the_student(demo_setup, tmp_path, monkeypatch):
    def full_disk(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", SECRET_PATH)

    monkeypatch.setattr(local, "_run_labs", full_disk)
    out = tmp_path / "graded"
    result = grade_submission(starter_copy(tmp_path / "student"), out, demo_setup, "alice")
    assert {lab.status for lab in result.labs} == {"grader-error"}
    for name in (FEEDBACK_FILE, SUMMARY_FILE, GRADESCOPE_FILE):
        text = (out / name).read_text()
        assert "OSError" in text and "grader-error.txt" in text, name
        assert "test_secret" not in text and "/tmp/" not in text and "No space" not in text, name
    detail = (out / GRADER_ERROR_FILE).read_text()
    assert SECRET_PATH in detail and "full_disk" in detail, "the instructor keeps the whole traceback"


def test_a_later_grading_that_works_removes_the_old_error_detail(demo_setup, tmp_path, monkeypatch):
    out = tmp_path / "graded"
    (out).mkdir()
    (out / GRADER_ERROR_FILE).write_text("an earlier failure")
    monkeypatch.setattr(local, "_run_labs", lambda *args, **kwargs: None)
    grade_submission(starter_copy(tmp_path / "student"), out, demo_setup, "alice")
    assert not (out / GRADER_ERROR_FILE).exists()


def test_a_report_lost_to_a_full_disk_is_the_grader_s_error(demo_setup, tmp_path, monkeypatch):
    """A nearly full TMPDIR cut pytest's JSON report, and the student read 'the submission's code left it so'."""
    import grader.execute.preflight as preflight
    import grader.execute.supervisor as supervisor

    monkeypatch.setattr(supervisor, "keep_report", lambda *args: "it is not JSON (a cut file)")
    monkeypatch.setattr(preflight, "free_bytes", lambda folder: 4096)
    out = tmp_path / "graded"
    result = grade_submission(starter_copy(tmp_path / "student"), out, demo_setup, "alice")
    assert {lab.status for lab in result.labs} == {"grader-error"}
    assert "scratch disk is full" in (out / GRADER_ERROR_FILE).read_text()
    assert "left it so" not in (out / FEEDBACK_FILE).read_text()


def test_grading_does_not_start_on_a_nearly_full_scratch_disk(tmp_path, monkeypatch):
    import pytest

    import grader.execute.preflight as preflight

    monkeypatch.setattr(preflight, "free_bytes", lambda folder: 10 * 2**20)
    with pytest.raises(preflight.GraderEnvironmentError, match="only 10 MiB free in the scratch folder"):
        preflight.check_scratch_space(tmp_path)
