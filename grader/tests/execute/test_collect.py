"""The rubric cache's key (:func:`grader.execute.collect.rubric_key`): it changes with every file the
collection of a lab's tests can depend on, wherever the course lives."""

from __future__ import annotations

import shutil

import pytest

from grader.course.labs import load_course
from grader.execute.collect import rubric_key
from grader.tests.corpus import DEMO_COURSE


@pytest.mark.parametrize("home", ["courses", "build", "results"])
def test_the_key_follows_the_lab_files_wherever_the_course_is(tmp_path, home):
    """Noise is judged on the course's own parts: a course kept under ``~/build/`` had every file count
    as build output, so its key never changed and a stale rubric was served after an edit."""
    root = tmp_path / home / "course"
    shutil.copytree(DEMO_COURSE, root, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    course = load_course(root)
    spec = course.labs[0]
    before = rubric_key(course, spec)
    test_file = spec.directory / "test_lab.py"
    test_file.write_text(test_file.read_text() + "\n# an instructor's edit\n")
    assert rubric_key(course, spec) != before, f"the key ignored an edit of {test_file.name} under {home}/"
    (spec.directory / "__pycache__").mkdir(exist_ok=True)
    edited = rubric_key(course, spec)
    (spec.directory / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert rubric_key(course, spec) == edited, "caches inside the course are still not part of the key"
