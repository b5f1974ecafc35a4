"""Shared fixtures of the grader's tests.

The demo course and the submission corpus under ``fixtures/`` are graded by the grader in
subprocesses; pytest must never collect them as the grader's own tests. The whole corpus is graded
once per session (``batch -j 2``) and every corpus test reads that one graded folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.batch import grade_all
from grader.course import load_course
from grader.rubric import build_rubric
from grader.run import GradeOptions, GradingSetup
from grader.runner import RunLimits
from grader.tests.corpus import DEMO_COURSE, corpus_names, materialize

collect_ignore_glob = ["fixtures/*"]

#: Limits for the demo course: its tests take milliseconds, so a few seconds means "stuck".
DEMO_LIMITS = RunLimits(test_timeout_s=4.0, lab_timeout_s=15.0)


@pytest.fixture(scope="session")
def rubric_cache(tmp_path_factory) -> Path:
    """One rubric cache for the session: the demo course's tests are collected once, not per test."""
    return tmp_path_factory.mktemp("rubric-cache")


@pytest.fixture(scope="session")
def demo_args(rubric_cache) -> list[str]:
    """Command-line options grading the demo course with the session's rubric cache and demo limits."""
    return ["--course", str(DEMO_COURSE), "--cache-dir", str(rubric_cache),
            "--test-timeout", str(DEMO_LIMITS.test_timeout_s), "--lab-timeout", str(DEMO_LIMITS.lab_timeout_s)]


@pytest.fixture(scope="session")
def demo_setup(rubric_cache) -> GradingSetup:
    """The demo course, its rubric (cached for the session) and the demo limits."""
    course = load_course(DEMO_COURSE)
    labs = course.select(None)
    rubric = build_rubric(course, labs, rubric_cache)
    return GradingSetup(course, labs, rubric, GradeOptions(gpu="auto", limits=DEMO_LIMITS))


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
