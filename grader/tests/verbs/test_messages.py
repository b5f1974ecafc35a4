"""What a long command says while and after it works: a reason's key lines on the console, a readable
traceback in feedback.md, a line per student and a heartbeat in a log file."""

from __future__ import annotations

import io
import shutil

from grader.__main__ import main
from grader.runners.progress import Progress, heartbeat_line
from grader.scoring.feedback import to_markdown
from grader.scoring.score import rescore
from grader.tests.conftest import NO_BUBBLEWRAP
from grader.tests.corpus import DEMO_COURSE, starter_copy


def test_an_unavailable_lab_shows_its_error_on_the_console_and_its_traceback_in_the_feedback(tmp_path, capsys):
    course = tmp_path / "course"
    shutil.copytree(DEMO_COURSE, course)
    tests = course / "labA_arith" / "test_lab.py"
    tests.write_text(tests.read_text() + "\ndef broken(:\n")
    out = tmp_path / "graded"
    status = main(
        [
            "run",
            str(starter_copy(tmp_path / "student")),
            "--out",
            str(out),
            "--course",
            str(course),
            "--no-cache",
            *(["--unsafe-no-sandbox"] if NO_BUBBLEWRAP else []),
        ]
    )
    err = capsys.readouterr().err
    assert status == 1 and "UNAVAILABLE" in err
    assert "SyntaxError" in err, "the console names the error, not only the first line of the reason"
    feedback = to_markdown(rescore(out))
    assert "```\n" in feedback and "SyntaxError" in feedback.split("```")[1], "the traceback, as a block"


def test_progress_in_a_log_file_is_a_line_per_student_and_a_heartbeat():
    clock = [0.0]
    stream = io.StringIO()
    with Progress(3, stream=stream, interactive=False, clock=lambda: clock[0]) as progress:
        progress.started()
        progress.started()
        clock[0] = 30.0
        progress.finished("alice: 9/16 graded")
        clock[0] = 61.0
        progress.tick()
        clock[0] = 70.0
        progress.tick()  # not due yet: one heartbeat a minute
    lines = stream.getvalue().splitlines()
    assert lines[0] == "grading 3 submission(s)"
    assert lines[1] == "[1/3] alice: 9/16 graded"
    assert lines[2] == "grading: 1 done, 1 running, 1 pending; 1 min 01 s elapsed, about 2 min 02 s left"
    assert lines[3].startswith("graded 1 of 3 in 1 min 10 s") and len(lines) == 4
    assert heartbeat_line(0, 2, 2, 5.0) == "grading: 0 done, 2 running, 0 pending; 5 s elapsed"


def test_the_readmes_say_which_stream_carries_batch_progress_and_how_to_log_it(capsys):
    """An instructor who redirects stdout sees no progress: the verbs table must say it is on stderr."""
    from pathlib import Path

    with Progress(1, interactive=False) as progress:  # the default stream, as batch uses it
        progress.finished("alice: 1/1 graded")
    streams = capsys.readouterr()
    assert streams.out == "" and "[1/1] alice" in streams.err
    root = Path(__file__).resolve().parents[3]
    for readme in (root / "README.md", root / "grader" / "README.md"):
        (row,) = [
            line
            for line in readme.read_text(encoding="utf-8").splitlines()
            if line.startswith("|") and "batch SUBMISSIONS" in line
        ]
        assert "standard error" in row and "2> batch.log" in row and "2>&1" in row and "tee" in row, readme
