"""The static review (:mod:`grader.execute.review`): no flag on the course's reference solutions or
starters, a flag on every attack of the corpus, each naming the file, the line and the construct."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.course.labs import load_course
from grader.execute.review import MAX_FLAGS_PER_FILE, findings, review_files
from grader.tests.corpus import SUBMISSIONS, corpus_names, expected
from labkit.labspec import COURSE_ROOT

COURSE = load_course(COURSE_ROOT)


@pytest.mark.parametrize("root", [COURSE_ROOT, COURSE_ROOT / "solutions"], ids=["starters", "reference"])
def test_the_courses_own_code_gets_no_flag(root):
    for spec in COURSE.labs:
        assert review_files(root, [f"{spec.package}/{name}" for name in spec.editable], label=spec.id) == []


#: The one attack whose editable file is harmless: its attack is a copy of the grader (flagged as tampering).
HARMLESS_EDITABLE = {"attack_ships_grader"}


@pytest.mark.parametrize("name", [name for name in corpus_names() if expected(name).get("attack")])
def test_every_attack_of_the_corpus_is_flagged_for_review(name):
    root = SUBMISSIONS / name
    editable = [str(path.relative_to(root)) for path in root.glob("lab*/*.py")]
    flags = review_files(root, editable, label="lab")
    assert bool(flags) != (name in HARMLESS_EDITABLE), f"{name}: {flags}"
    assert all(flag.startswith("lab: review: lab") and ".py:" in flag for flag in flags)


@pytest.mark.parametrize(
    "source, what",
    [
        ("import os as o\no.fork()", "uses os.fork"),
        ("from sys import _getframe", "imports sys._getframe"),
        ("import ctypes.util", "imports ctypes.util"),
        ("def pytest_runtest_makereport(item, call):\n    pass", "defines pytest_runtest_makereport"),
        ("import os\nos.execv('/bin/sh', [])", "uses os.execv"),
        ("def f():\n    return f.__globals__", "reads .__globals__"),
        ("PATH = '/proc/self/environ'", "a string naming '/proc/'"),
        ('_reports = __import__("_pytest.reports", fromlist=["TestReport"])', "calls __import__"),
        (
            '_reports = __import__("_pytest.reports", fromlist=["TestReport"])',
            "a string naming the module '_pytest.reports'",
        ),
        ("exec('x = 1')", "calls exec: runs code from a string"),
        ("name = 'ctypes'", "a string naming the module 'ctypes'"),
    ],
)
def test_each_construct_is_named_with_its_line(source, what):
    found = findings(source)
    assert any(text.startswith(what) for _, text in found), found
    assert all(line >= 1 for line, _ in found)


def test_docstrings_plain_code_and_unparsable_files_get_no_flag():
    assert findings('"""Reads the heldout folder? No: a docstring may name the grader."""\nx = 1\n') == []
    assert findings("import os\nos.path.join('a', 'b')\nimport torch\n") == []
    assert findings("def broken(:\n") == []


def test_a_file_with_many_constructs_is_capped(tmp_path: Path):
    (tmp_path / "many.py").write_text(
        "\n".join(
            f"import {name}"
            for name in ("ctypes", "gc", "socket", "signal", "subprocess", "builtins", "importlib", "multiprocessing")
        )
    )
    flags = review_files(tmp_path, ["many.py"])
    assert len(flags) == MAX_FLAGS_PER_FILE + 1 and flags[-1].endswith("2 more constructs to read")
