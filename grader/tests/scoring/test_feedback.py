"""What a student reads: the next step as ``nox -s labNN`` names it, the extension apart, clean messages.

The results are built by hand (scoring is pure); the half-finished submission is step 1 done, step 2
failing with a message from the grader's sandbox, step 3 not started and the optional extension not tried.
"""

from __future__ import annotations

import json
import re

from grader.scoring.feedback import next_step, to_gradescope, to_markdown
from grader.scoring.results import LabResult, SubmissionResult, TestResult
from grader.scoring.student_text import course_relative, student_message
from labkit import step_summary
from labkit.labspec import Step

SANDBOX = "/tmp/grader-_uxnrhxc/course"
LONG_REASON = (
    "AssertionError: clamp(1.0, 0.0, 0.0) returned 1.0, which is above the upper bound; "
    + "the value must stay within [low, high] for every input the property draws " * 4
)
STEPS = (
    Step(1, "add and mean", ("arith.py",), ("test_add",)),
    Step(2, "clamp", ("arith.py",), ("test_clamp",)),
    Step(3, "Fibonacci", ("arith.py",), ("test_fib",)),
    Step(4, "optional extension: large numbers", ("arith.py",), ("test_fib_large",)),
)


def half_finished() -> SubmissionResult:
    node = "labA_arith/test_lab.py::"
    tests = (
        TestResult(node + "test_add[1-2]", "test_add", 1, 1, False, "passed"),
        TestResult(
            node + "test_clamp",
            "test_clamp",
            0,
            2,
            False,
            "failed",
            f"{LONG_REASON} <module 'labA_arith' from '{SANDBOX}/labA_arith/__init__.py'>",
        ),
        TestResult(
            node + "test_fib",
            "test_fib",
            0,
            3,
            False,
            "failed",
            f"NotImplementedError: TODO: fib ({SANDBOX}/labA_arith/arith.py:12)",
        ),
        TestResult(
            node + "test_fib_large",
            "test_fib_large",
            0,
            2,
            False,
            "failed",
            "NotImplementedError: TODO",
            extension=True,
        ),
        TestResult(
            "labA_arith/heldout/test_heldout.py::test_secret_case",
            "test_secret_case",
            0,
            1,
            False,
            "failed",
            "secret",
            visibility="hidden",
            area="clamping to other bounds",
        ),
    )
    lab = LabResult(
        "labA",
        "Demo: arithmetic",
        "labA_arith",
        1,
        7,
        0,
        "graded",
        f"see {SANDBOX}/labA_arith/arith.py",
        tests=tests,
        steps=STEPS,
    )
    return SubmissionResult("alice", "auto", (lab,))


def test_feedback_names_the_next_step_as_nox_does():
    result = half_finished()
    (lab,) = result.labs
    outcomes = [
        step_summary.TestOutcome(
            t.nodeid,
            t.nodeid.split("::")[-1].split("[")[0],
            t.max_points,
            "passed" if t.outcome == "passed" else "failed",
        )
        for t in lab.tests
        if not t.heldout
    ]
    spec_lines = step_summary.summary_lines(
        step_summary.LabSpec("labA", "labA_arith", "Demo", ("arith.py",), (), None, STEPS), outcomes
    )
    assert next_step(lab) == spec_lines[-2:], "the same lines nox -s labA ends with"
    assert next_step(lab)[0].startswith("Start here: step 2, clamp")
    page = to_markdown(result)
    assert "**Next:** step 2, clamp (arith.py); its tests: nox -s labA -- --step 2" in page
    assert re.search(r"\| ❌ \| 2 · arith.py \| `test_clamp` \|", page), "each test row names its step and file"
    assert "Start here: step 2, clamp" in to_gradescope(result)["output"]
    names = [test["name"] for test in to_gradescope(result)["tests"]]
    assert "labA · step 2 · arith.py · test_clamp" in names and "secret" not in page and "test_secret_case" not in page


def test_the_optional_extension_has_its_own_section_and_is_not_among_the_scored_tests():
    page = to_markdown(half_finished())
    scored, _, extension = page.partition("### Optional extension step: 0/2, apart from the score")
    assert extension, page
    assert "test_fib_large" not in scored and "`test_fib_large`" in extension
    assert "`test_clamp`" in scored and "`test_clamp`" not in extension


def test_no_student_output_shows_a_path_of_the_graders_machine():
    result = half_finished()
    for text in (to_markdown(result), json.dumps(to_gradescope(result))):
        assert "/tmp/" not in text and "grader-_uxnrhxc" not in text
    page = to_markdown(result)
    assert "labA_arith/arith.py:12" in page and "see labA_arith/arith.py" in page
    assert course_relative("/opt/env/lib/python3.12/site-packages/torch/fx/graph.py:3") == "torch/fx/graph.py:3"
    assert course_relative("wrote /tmp/pytest-of-nobody/pytest-3/x0/out.png.") == "wrote .../out.png."
    assert course_relative("3/4 of http://example.org/a/b") == "3/4 of http://example.org/a/b"


def test_reasons_are_cut_at_a_sentence_or_clause_never_mid_word():
    cell = student_message(LONG_REASON, limit=120)
    assert len(cell) <= 120 and cell.endswith(" ...")
    assert cell == "AssertionError: clamp(1.0, 0.0, 0.0) returned 1.0, which is above the upper bound ..."
    words = set(LONG_REASON.replace(";", " ").split())
    for text in (step_summary.shorten("word " * 50, 33), student_message("x" * 10 + " yyyyyyyyyy" * 20, limit=50)):
        assert all(word in words | {"word", "x" * 10, "yyyyyyyyyy", "..."} for word in text.split()), text
    page = to_markdown(half_finished())
    (row,) = [line for line in page.splitlines() if "`test_clamp`" in line]
    why = row.rsplit("|", 2)[-2].strip()
    whole_words = {word.rstrip(",;:") for word in LONG_REASON.split()}
    assert why.endswith(" ...") and len(why) <= 300 and why[:-4].split()[-1].rstrip(",;:") in whole_words
