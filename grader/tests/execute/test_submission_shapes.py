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
from grader.execute.sandbox import SubmissionError, find_tampering, unpack_submission
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
    assert (
        "tampering: labA_arith/helpers.py is not a regular file (ignored: only the editable files are graded)"
        in (found[0])
    )
    assert "tampering: conftest.py is not a regular file (ignored: only the editable files are graded)" in found[0]


def _zip(path, names):
    with zipfile.ZipFile(path, "w") as archive:
        for name in names:
            archive.writestr(name, "def add(a, b):\n    return a + b\n")
    return path


def test_the_demo_names_are_what_the_grader_passes():
    assert load_course(DEMO_COURSE).lab_packages == DEMO_NAMES


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


def test_a_folder_wrapped_around_the_course_is_found_with_notes_beside_it(tmp_path):
    """A class's zips each unzipped into a folder of the student's name: alice/course-copy/<course>."""
    wrapper = tmp_path / "alice"
    starter_copy(wrapper / "course-copy")
    (wrapper / "README.txt").write_text("my notes")
    assert unpack_submission(wrapper, tmp_path / "s1", DEMO_NAMES) == wrapper / "course-copy"
    two = tmp_path / "bob"  # two copies side by side: ambiguous, graded as given
    starter_copy(two / "first")
    starter_copy(two / "second")
    assert unpack_submission(two, tmp_path / "s2", DEMO_NAMES) == two


def test_a_submission_with_none_of_the_editable_files_says_so(tmp_path):
    from grader.execute.sandbox import overlay_editable

    course = load_course(DEMO_COURSE)
    empty = tmp_path / "empty"
    empty.mkdir()
    overlay = overlay_editable(list(course.labs), empty, tmp_path / "sandbox")
    assert any("none of the labs' editable files" in flag for flag in overlay.flags)
    assert not any("none of" in flag for flag in overlay_editable(list(course.labs), DEMO_COURSE, tmp_path / "s").flags)


def test_a_course_behind_a_symbolic_link_is_not_followed_and_the_flag_names_the_link(tmp_path):
    """alice/course -> a course elsewhere: never followed (it could lead anywhere on the grader's machine),
    so the starters are graded, and the flag says the link is why rather than asking whether it is a copy."""
    from grader.execute.sandbox import overlay_editable

    course = load_course(DEMO_COURSE)
    elsewhere = starter_copy(tmp_path / "elsewhere")
    wrapper = tmp_path / "alice"
    (wrapper / "work").mkdir(parents=True)
    (wrapper / "work" / "course").symlink_to(elsewhere)
    root = unpack_submission(wrapper, tmp_path / "s1", DEMO_NAMES)
    assert root == wrapper, "a link must not be followed to find the course"
    flags = overlay_editable(list(course.labs), root, tmp_path / "sandbox").flags
    assert any("work/course is a symbolic link, which the grader never follows" in flag for flag in flags), flags


@pytest.mark.parametrize(
    ("names", "reason"),
    [
        ([], "it holds no file at all"),
        (["labA_arith/", "notes/"], "2 empty folders and no file"),
        (["labA_arith/__pycache__/arith.cpython-311.pyc", "labA_arith/build/arith.py"], "none of them gradable"),
    ],
)
def test_a_zip_with_nothing_to_grade_says_what_it_holds(tmp_path, names, reason):
    archive = tmp_path / "carol.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for name in names:
            handle.writestr(name, "" if name.endswith("/") else "x = 1\n")
    with pytest.raises(SubmissionError, match=reason):
        unpack_submission(archive, tmp_path / "s1", DEMO_NAMES)


def test_an_unreadable_editable_file_costs_only_that_file(tmp_path, monkeypatch):
    from pathlib import Path

    from grader.execute.sandbox import overlay_editable

    course = load_course(DEMO_COURSE)
    submission = starter_copy(tmp_path / "student")
    unreadable = submission / "labA_arith" / "arith.py"
    real_read = Path.read_bytes

    def read_bytes(path):
        if path == unreadable:
            raise PermissionError(13, "Permission denied")
        return real_read(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    overlay = overlay_editable(list(course.labs), submission, tmp_path / "sandbox")
    assert overlay.taken == ["labB_text/text.py"]
    assert "labA_arith/arith.py cannot be read (Permission denied; the starter's file was used)" in overlay.flags


def test_a_tree_hundreds_of_levels_deep_is_one_flag_not_a_crash(tmp_path):
    course = load_course(DEMO_COURSE)
    submission = starter_copy(tmp_path / "student")
    os.makedirs(submission / "labA_arith" / os.path.join(*["a"] * 200))
    flags = find_tampering(course, submission)
    assert len(flags) == 1 and "nested deeper than 32 levels" in flags[0] and str(tmp_path) not in flags[0]
    from grader.execute.sandbox import SubmissionError

    with pytest.raises(SubmissionError, match="nested deeper than 32 folders"):
        unpack_submission(_zip(tmp_path / "deep.zip", ["a/" * 40 + "x.py"]), tmp_path / "s1", DEMO_NAMES)


def test_thousands_of_added_files_are_counted_not_listed(tmp_path):
    course = load_course(DEMO_COURSE)
    submission = starter_copy(tmp_path / "student")
    packages = submission / "labA_arith" / "myenv" / "site-packages"
    packages.mkdir(parents=True)
    for index in range(300):
        (packages / f"module_{index}.py").write_text("")
    flags = find_tampering(course, submission)
    assert len(flags) == 51 and flags[-1] == "tampering: and 250 more like these (only the first 50 are listed)"


def test_macos_metadata_beside_the_course_is_not_a_second_course(tmp_path):
    archive = _zip(tmp_path / "mac.zip", ["course/labA_arith/arith.py", "__MACOSX/labA_arith/._arith.py"])
    root = unpack_submission(archive, tmp_path / "s1", DEMO_NAMES)
    assert root.name == "course" and (root / "labA_arith" / "arith.py").is_file()
