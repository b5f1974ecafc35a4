"""End to end on the real course: lab 1's reference solution and untouched starter, through the grader.

This is the one grader test that runs real lab code (torch, FX). It grades lab 1 only, to stay within
the test budget; ``nox -s grade`` does the same for every lab. It skips, saying why, while lab 1 is
not written yet.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.batch import grade_all
from grader.course import load_course, make_reference_submission
from grader.results import EVIDENCE_PASSED, EVIDENCE_PENDING, PASSED, PENDING
from grader.rubric import build_rubric
from grader.run import GradeOptions, GradingSetup
from grader.score import rescore

LAB = "lab01_fx_passes"


def _lab01_setup(cache: Path) -> GradingSetup:
    course = load_course()
    specs = [spec for spec in course.labs if spec.package == LAB]
    if not specs:
        pytest.skip(f"{LAB} is not ready to grade yet: {course.not_ready.get(LAB, 'no lab folder')}")
    missing = [name for name in specs[0].editable if not (course.solutions / LAB / name).is_file()]
    if missing:
        pytest.skip(f"the reference solution of {LAB} lacks {', '.join(missing)} yet")
    rubric = build_rubric(course, specs, cache)
    assert rubric.labs[0].error is None, f"lab 1's own tests must collect: {rubric.labs[0].error}"
    return GradingSetup(course, specs, rubric, GradeOptions(gpu="auto"))


@pytest.fixture(scope="module")
def lab01_graded(tmp_path_factory) -> dict:
    setup = _lab01_setup(tmp_path_factory.mktemp("rubric"))
    scratch = tmp_path_factory.mktemp("lab01")
    reference = make_reference_submission(setup.course, scratch / "reference")
    grade_all([("reference", reference), ("starter", setup.course.root)], scratch / "graded", setup, jobs=2,
              show_progress=False)
    return {name: rescore(scratch / "graded" / name).lab(setup.rubric.labs[0].lab) for name in ("reference", "starter")}


def test_the_reference_solution_earns_every_cpu_point(lab01_graded):
    lab = lab01_graded["reference"]
    failing = [f"{t.nodeid}: {t.outcome}: {t.message}" for t in lab.tests if t.outcome not in (PASSED, PENDING)]
    assert lab.status == "graded" and not failing, f"{lab.reason} {failing}"
    assert lab.score + lab.pending == lab.max_score > 0
    assert all(point.status in (EVIDENCE_PASSED, EVIDENCE_PENDING) for point in lab.talking_points)


def test_the_untouched_starter_scores_zero(lab01_graded):
    lab = lab01_graded["starter"]
    passing = [t.nodeid for t in lab.tests if t.points]
    assert lab.status == "graded" and lab.score == 0, f"{lab.reason}; passing on the starter: {passing}"
    assert lab.max_score == lab01_graded["reference"].max_score
