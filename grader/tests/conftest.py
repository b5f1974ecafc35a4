"""Shared fixtures of the grader's tests.

The demo course and the submission corpus under ``fixtures/`` are graded by the grader in
subprocesses; pytest must never collect them as the grader's own tests. The whole corpus is graded
once per session (``batch -j 2``) and every corpus test reads that one graded folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grader.course.labs import load_course
from grader.execute.collect import build_rubric
from grader.execute.isolation import Bubblewrap, Unisolated, bubblewrap_problem
from grader.execute.limits import RunLimits
from grader.runners.batch import grade_all
from grader.runners.local import GradeOptions, GradingSetup
from grader.tests.corpus import DEMO_COURSE, corpus_names, materialize

collect_ignore_glob = ["fixtures/*"]

#: Limits for the demo course. Its tests take milliseconds, so every test gets the 3 s minimum ("stuck");
#: starting Python and pytest is most of a demo lab's time, so a factor of 2 (not 10) on that start-up
#: keeps the lab budget short; the streak rule stops a lab after 3 timeouts in a row (labA has 6 tests).
DEMO_LIMITS = RunLimits(time_factor=2.0, min_test_timeout_s=3.0, min_startup_s=10.0, max_consecutive_timeouts=3)
#: Why graded processes cannot be isolated on this machine (None: bubblewrap works). The grader's tests
#: then grade unisolated, and the tests of what isolation guarantees skip, saying why.
NO_BUBBLEWRAP = bubblewrap_problem()
needs_bubblewrap = pytest.mark.skipif(
    NO_BUBBLEWRAP is not None, reason=f"isolation needs bubblewrap: {NO_BUBBLEWRAP} (apt-get install bubblewrap)"
)


@pytest.fixture(scope="session")
def rubric_cache(tmp_path_factory) -> Path:
    """One rubric cache for the session: the demo course's tests are collected once, not per test."""
    return tmp_path_factory.mktemp("rubric-cache")


@pytest.fixture(scope="session")
def demo_args(rubric_cache) -> list[str]:
    """Command-line options grading the demo course with the session's rubric cache and demo limits."""
    return [
        "--course",
        str(DEMO_COURSE),
        "--cache-dir",
        str(rubric_cache),
        "--time-factor",
        str(DEMO_LIMITS.time_factor),
        "--min-test-timeout",
        str(DEMO_LIMITS.min_test_timeout_s),
        "--max-consecutive-timeouts",
        str(DEMO_LIMITS.max_consecutive_timeouts),
        *(["--unsafe-no-sandbox"] if NO_BUBBLEWRAP else []),
    ]


@pytest.fixture(scope="session")
def demo_setup(rubric_cache) -> GradingSetup:
    """The demo course, its rubric (cached for the session) and the demo limits."""
    course = load_course(DEMO_COURSE)
    labs = course.select(None)
    rubric = build_rubric(course, labs, rubric_cache)
    isolation = Unisolated() if NO_BUBBLEWRAP else Bubblewrap(sys.executable, course.root)
    return GradingSetup(course, labs, rubric, GradeOptions(gpu="auto", limits=DEMO_LIMITS, isolation=isolation))


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    """Every corpus submission, materialized as a full student copy."""
    root = tmp_path_factory.mktemp("submissions")
    for name in corpus_names():
        materialize(name, root / name)
    return root


@pytest.fixture(scope="session")
def graded_corpus(corpus_dir, demo_setup, tmp_path_factory) -> Path:
    """The corpus graded once, two submissions at a time (the batch verb's code path)."""
    out = tmp_path_factory.mktemp("graded")
    submissions = [(name, corpus_dir / name) for name in corpus_names()]
    grade_all(submissions, out, demo_setup, jobs=2, show_progress=False)
    return out
