"""Course discovery, the sandbox (only editable files are taken) and reading submissions."""

from __future__ import annotations

import os
import shutil
import zipfile

import pytest

from grader.course.labs import CourseError, check_editable, load_course
from grader.evidence.text import shorten_strings, trim_file, truncate_text
from grader.execute.sandbox import SubmissionError, build_sandbox, find_tampering, unpack_submission
from grader.tests.corpus import DEMO_COURSE, DEMO_NAMES, starter_copy
from labkit.labspec import LabSpec


def test_the_demo_course_has_two_ready_labs():
    course = load_course(DEMO_COURSE)
    assert [spec.id for spec in course.labs] == ["labA", "labB"] and course.not_ready == {}
    assert [str(p) for p in course.editable_paths()] == ["labA_arith/arith.py", "labB_text/text.py"]
    with pytest.raises(CourseError, match="unknown or unready lab 'labZ'"):
        course.select(["labZ"])


def test_a_lab_folder_without_tests_is_not_ready(tmp_path):
    course_root = starter_copy(tmp_path / "course")
    (course_root / "labB_text" / "test_lab.py").unlink()
    course = load_course(course_root)
    assert [spec.id for spec in course.labs] == ["labA"] and "no test_lab.py" in course.not_ready["labB_text"]


@pytest.mark.parametrize("entry", ["../escape.py", "/abs.py", "test_lab.py", "conftest.py", "sub/test_x.py"])
def test_unsafe_editable_entries_are_refused(tmp_path, entry):
    spec = LabSpec("labQ", "labQ_demo", "Q", (entry,), (), tmp_path)
    with pytest.raises(CourseError, match="editable entry"):
        check_editable(spec)


def test_the_sandbox_takes_only_editable_files_and_blocks_the_solutions(tmp_path):
    course = load_course(DEMO_COURSE)
    submission = starter_copy(tmp_path / "student")
    (submission / "labA_arith" / "arith.py").write_text("STUDENT = 1\n")
    (submission / "labA_arith" / "test_lab.py").write_text("# emptied\n")
    (submission / "labA_arith" / "conftest.py").write_text("# a plugin\n")
    (submission / "labA_arith" / "notes.md").write_text("my notes\n")
    overlay = build_sandbox(course, list(course.labs), submission, tmp_path / "sandbox")
    sandbox = tmp_path / "sandbox"
    assert (sandbox / "labA_arith" / "arith.py").read_text() == "STUDENT = 1\n"
    tests = (sandbox / "labA_arith" / "test_lab.py").read_text()
    assert tests == (DEMO_COURSE / "labA_arith" / "test_lab.py").read_text(), "the pristine tests, unchanged"
    assert not (sandbox / "labA_arith" / "conftest.py").exists()
    assert "raise ImportError" in (sandbox / "solutions" / "__init__.py").read_text()
    assert overlay.taken == ["labA_arith/arith.py", "labB_text/text.py"]
    assert len(overlay.flags) == 2 and all(flag.startswith("tampering:") for flag in overlay.flags)


def test_a_lab_folder_linked_to_the_reference_is_not_taken(tmp_path):
    course = load_course(DEMO_COURSE)
    submission = starter_copy(tmp_path / "student")
    shutil.rmtree(submission / "labA_arith")
    (submission / "labA_arith").symlink_to(DEMO_COURSE / "solutions" / "labA_arith", target_is_directory=True)
    (submission / "labB_text" / "text.py").unlink()
    (submission / "labB_text" / "text.py").symlink_to(DEMO_COURSE / "solutions" / "labB_text" / "text.py")
    overlay = build_sandbox(course, list(course.labs), submission, tmp_path / "sandbox")
    assert overlay.taken == [], "no file reached through a link is taken"
    sandbox = tmp_path / "sandbox"
    for rel in ("labA_arith/arith.py", "labB_text/text.py"):
        assert (sandbox / rel).read_text() == (DEMO_COURSE / rel).read_text(), f"{rel}: the starter's"
    assert any("labA_arith is a symbolic link" in flag for flag in overlay.flags)
    assert any("labB_text/text.py is a symbolic link" in flag for flag in overlay.flags)


def test_a_hard_link_to_another_file_is_not_taken(tmp_path):
    course = load_course(DEMO_COURSE)
    submission = starter_copy(tmp_path / "student")
    elsewhere = tmp_path / "reference_copy.py"
    elsewhere.write_text("def add(a, b):\n    return a + b\n")
    (submission / "labA_arith" / "arith.py").unlink()
    os.link(elsewhere, submission / "labA_arith" / "arith.py")
    overlay = build_sandbox(course, list(course.labs), submission, tmp_path / "sandbox")
    assert "labA_arith/arith.py" not in overlay.taken and any("hard link" in flag for flag in overlay.flags)


def test_a_copy_of_the_grader_in_a_submission_is_flagged(tmp_path):
    course = load_course(DEMO_COURSE)
    submission = starter_copy(tmp_path / "student")
    (submission / "grader").mkdir()
    (submission / "grader" / "__main__.py").write_text("print('170/170')\n")
    assert any("grader/__main__.py" in flag for flag in find_tampering(course, submission))


def test_an_untouched_starter_has_no_tampering():
    course = load_course(DEMO_COURSE)
    assert find_tampering(course, DEMO_COURSE) == []


def test_zip_submissions_are_unwrapped_and_unsafe_ones_refused(tmp_path):
    archive = tmp_path / "alice.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("course/labA_arith/arith.py", "X = 1\n")
    folder = unpack_submission(archive, tmp_path / "scratch", DEMO_NAMES)
    assert (folder / "labA_arith" / "arith.py").read_text() == "X = 1\n"
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as handle:
        handle.writestr("../../etc/owned", "x")
    with pytest.raises(SubmissionError, match="unsafe path"):
        unpack_submission(evil, tmp_path / "scratch2", DEMO_NAMES)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(SubmissionError, match="folder or a .zip"):
        unpack_submission(tmp_path / "notes.txt", tmp_path / "scratch3", DEMO_NAMES)


def test_long_text_keeps_its_head_and_tail(tmp_path):
    text = "H" * 50 + "M" * 1000 + "T" * 50
    short = truncate_text(text, 100)
    assert short.startswith("H" * 50) and short.endswith("T" * 50) and "1000 characters truncated" in short
    assert shorten_strings({"a": [text]}, 100) == {"a": [short]}
    path = tmp_path / "out.txt"
    path.write_bytes(b"h" * 10 + b"m" * 10_000 + b"t" * 10)
    trim_file(path, 20)
    data = path.read_bytes()
    assert data.startswith(b"h" * 10) and data.endswith(b"t" * 10) and len(data) < 100
