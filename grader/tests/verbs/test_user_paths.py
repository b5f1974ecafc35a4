"""The grader as users run it: relative paths from any working directory, the wrong Python, the
grader's own failures (never the student's ``collection-error``) and the exit status that says so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.__main__ import main
from grader.execute import supervisor as runner
from grader.scoring.results import EXIT_GRADER_FAULT, EXIT_OK, EXIT_USAGE
from grader.tests.corpus import DEMO_COURSE, materialize
from labkit.labspec import COURSE_ROOT

#: What the demo course's reference earns (labB's GPU test is pending without CUDA).
REFERENCE_TOTAL = {
    "score": 23,
    "max_score": 26,
    "pending": 3,  # held-out tests included
    "visible": {"score": 14, "max_score": 17, "pending": 3},
    "heldout": {"score": 9, "max_score": 9, "pending": 0},
    "extension": {"score": 2, "max_score": 2, "pending": 0},
}


def relative_demo_args(rubric_cache: Path) -> list[str]:
    """The demo options with every path relative to the current working directory."""
    return [
        "--course",
        os.path.relpath(DEMO_COURSE),
        "--cache-dir",
        os.path.relpath(rubric_cache),
        "--test-timeout",
        "4",
        "--lab-timeout",
        "15",
    ]


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """A class of two under ``tmp_path/class`` and a working directory that is neither it nor the course."""
    materialize("solution", tmp_path / "class" / "alice")
    materialize("starter", tmp_path / "class" / "bob")
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_every_verb_takes_relative_paths_from_another_directory(elsewhere, rubric_cache, capsys):
    args = relative_demo_args(rubric_cache)
    assert main(["run", "../class/alice", "--out", "graded/me", *args]) == EXIT_OK
    summary = json.loads((elsewhere / "graded/me/summary.json").read_text())
    assert summary["total"] == REFERENCE_TOTAL, summary["labs"]["labA"]["reason"]

    assert main(["batch", "../class", "--out", "graded/class", "-j", "2", *args]) == EXIT_OK
    rows = {row["student"]: row for row in json.loads((elsewhere / "graded/class/batch.json").read_text())["rows"]}
    assert rows["alice"]["score"] == REFERENCE_TOTAL["score"] and rows["bob"]["score"] == 0
    assert set(rows["alice"]["statuses"].values()) == set(rows["bob"]["statuses"].values()) == {"graded"}

    assert main(["score", "graded/me", "--format", "json"]) == EXIT_OK
    assert main(["report", "graded/class", "--out", "report"]) == EXIT_OK
    assert (elsewhere / "report" / "class.html").is_file()
    assert "collection-error" not in capsys.readouterr().out


def test_a_probe_plugin_that_cannot_load_is_a_grader_error_and_exits_nonzero(
    elsewhere, rubric_cache, monkeypatch, capsys
):
    real_command = runner.pytest_command

    def without_probe(*args, **kwargs):
        return [part.replace("grader.execute.probe", "grader.no_such_probe") for part in real_command(*args, **kwargs)]

    monkeypatch.setattr(runner, "pytest_command", without_probe)
    args = relative_demo_args(rubric_cache)
    assert main(["run", "../class/alice", "--out", "graded/me", *args]) == EXIT_GRADER_FAULT
    labs = json.loads((elsewhere / "graded/me/summary.json").read_text())["labs"]
    assert {lab["status"] for lab in labs.values()} == {"grader-error"}
    assert "not the submission's" in labs["labA"]["reason"] and "no_such_probe" in labs["labA"]["reason"]
    err = capsys.readouterr().err
    assert "GRADER ERROR" in err and "not the students' fault" in err

    assert main(["batch", "../class", "--out", "graded/class", *args]) == EXIT_GRADER_FAULT
    assert "grade them again with --only=alice --only=bob" in capsys.readouterr().err


def test_an_output_folder_that_cannot_be_written_grades_nothing(elsewhere, rubric_cache, capsys):
    Path("taken").write_text("a file, not a folder")
    for verb, submission in (("run", "../class/alice"), ("batch", "../class")):
        assert main([verb, submission, "--out", "taken/out", *relative_demo_args(rubric_cache)]) == EXIT_USAGE
        assert "cannot write the results to" in capsys.readouterr().err


def test_a_submission_path_that_does_not_exist_is_refused(elsewhere, rubric_cache, capsys):
    assert main(["run", "../class/alcie", "--out", "graded/me", *relative_demo_args(rubric_cache)]) == EXIT_USAGE
    assert "class/alcie does not exist" in capsys.readouterr().err
    assert not (elsewhere / "graded").exists()


def test_a_course_whose_packages_this_python_lacks_is_refused_before_grading(elsewhere, tmp_path, rubric_cache, capsys):
    course = tmp_path / "course"
    shutil.copytree(DEMO_COURSE, course)
    pyproject = course / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'requires-python = ">=3.10"', 'requires-python = ">=3.10"\ndependencies = ["no-such-course-dependency>=1"]'
        )
    )
    assert (
        main(
            [
                "run",
                "../class/alice",
                "--out",
                "graded/me",
                "--course",
                "../course",
                "--cache-dir",
                os.path.relpath(rubric_cache),
            ]
        )
        == EXIT_USAGE
    )
    err = capsys.readouterr().err
    assert "no-such-course-dependency (not installed)" in err and "Nothing was graded" in err
    assert "course-env" in err  # names the interpreter to use (or how to create it)
    assert not (elsewhere / "graded/me/summary.json").exists()


def without_site_packages(*command: str) -> subprocess.CompletedProcess:
    """Run ``python -S command`` from the course root: a Python that has none of the course's packages."""
    return subprocess.run(
        [sys.executable, "-S", *command], cwd=COURSE_ROOT, capture_output=True, text=True, timeout=120
    )


def test_the_grader_run_from_another_python_names_the_right_interpreter():
    done = without_site_packages("-m", "grader", "run", ".", "--out", "graded/me")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "is not the course's environment" in done.stderr and "torch (not installed)" in done.stderr
    assert "-m grader run . --out graded/me" in done.stderr and "nox -s grade-me" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_selfcheck_line_counts_gpu_tests_and_gpu_points_apart(capsys, rubric_cache):
    assert (
        main(
            [
                "selfcheck",
                "--course",
                str(DEMO_COURSE),
                "--cache-dir",
                str(rubric_cache),
                "--labs",
                "labB",
                "--test-timeout",
                "4",
                "--lab-timeout",
                "15",
            ]
        )
        == EXIT_OK
    )
    assert (
        "labB: 5 tests worth 10 points, of which 1 GPU test worth 3 points (pending without CUDA); "
        "2 held-out tests worth 3 points"
    ) in capsys.readouterr().err
