"""Submissions shaped to trap the grader's own reading of them: links out of the submission, files that
block a read, zips built by other tools. Each is graded or flagged by name, never followed, never
blocking, never unwrapped wrongly."""

from __future__ import annotations

import os
import threading
import zipfile

import pytest

from grader.course.labs import load_course
from grader.execute.archive import _inside
from grader.execute.sandbox import GRADER_DIR, SubmissionError, find_tampering, unpack_submission
from grader.tests.corpus import DEMO_COURSE, DEMO_NAMES, starter_copy


@pytest.mark.parametrize("name", ["grader", "labA_arith", "labkit"])
def test_a_top_level_folder_linked_out_of_the_submission_is_flagged_not_walked(tmp_path, name):
    course = load_course(DEMO_COURSE)
    submission = starter_copy(tmp_path / "student")
    target = submission / name
    if target.exists():
        os.rename(target, tmp_path / "moved")
    target.symlink_to(DEMO_COURSE if name != "grader" else "/")
    flags = find_tampering(course, submission)
    assert flags == [f"tampering: {name} is a symbolic link (ignored: only the editable files are graded)"]


def test_a_fifo_in_a_lab_folder_is_flagged_without_opening_it(tmp_path):
    course = load_course(DEMO_COURSE)
    submission = starter_copy(tmp_path / "student")
    os.mkfifo(submission / "labA_arith" / "helpers.py")
    os.mkfifo(submission / "conftest.py.new")
    (submission / "conftest.py").unlink()
    os.mkfifo(submission / "conftest.py")
    found: list[list[str]] = []
    reader = threading.Thread(target=lambda: found.append(find_tampering(course, submission)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert found, "find_tampering blocked on a FIFO"
    assert "tampering: labA_arith/helpers.py is not a regular file (ignored: only the editable files are graded)" in (
        found[0]
    )
    assert "tampering: conftest.py at the top of the course is not a regular file (ignored)" in found[0]


def _zip(path, names):
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, "def add(a, b):\n    return a + b\n")
    return path


def test_the_demo_names_are_what_the_grader_passes():
    assert load_course(DEMO_COURSE).root_names | {GRADER_DIR} == DEMO_NAMES


def test_a_zip_holding_only_a_lab_folder_is_a_course_root_not_a_wrapper(tmp_path):
    names = DEMO_NAMES
    root = unpack_submission(_zip(tmp_path / "alice.zip", ["labA_arith/arith.py"]), tmp_path / "s1", names)
    assert (root / "labA_arith" / "arith.py").is_file()


def test_wrapping_folders_around_the_course_are_unwrapped(tmp_path):
    names = DEMO_NAMES
    archive = _zip(tmp_path / "alice.zip", ["alice/course/labA_arith/arith.py", "alice/course/labB_text/text.py"])
    root = unpack_submission(archive, tmp_path / "s1", names)
    assert (root / "labA_arith" / "arith.py").is_file() and root.name == "course"


def test_backslash_separated_names_extract_as_folders_and_stay_checked(tmp_path):
    names = DEMO_NAMES
    root = unpack_submission(_zip(tmp_path / "win.zip", ["labA_arith\\arith.py"]), tmp_path / "s1", names)
    assert (root / "labA_arith" / "arith.py").is_file()
    with pytest.raises(SubmissionError, match="unsafe path"):
        unpack_submission(_zip(tmp_path / "evil.zip", ["..\\..\\escape.py"]), tmp_path / "s2", names)


def test_an_extraction_error_names_the_entry_not_the_grader_folder(tmp_path):
    target = tmp_path / "scratch" / "unpacked"
    assert _inside(f"{target}/labA_arith/x.py", target) == "labA_arith/x.py"
    assert _inside("/elsewhere/deep/x.py", target) == "x.py"
