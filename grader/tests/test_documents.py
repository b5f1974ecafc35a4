"""The numbers the course's documents state (tests, points, held-out and GPU tests) are the rubric's.

A document that counts tests by hand drifts as soon as a test is added (the README once said lab 3's
held-out tests had "6 of them GPU" where the rubric had 3 GPU tests worth 6 points). Each number below
is read out of the document and compared with the pristine rubric, collected as the grader collects it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.course.labs import load_course
from grader.course.rubric import LabRubric, Rubric
from grader.execute.collect import build_rubric

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def rubric(tmp_path_factory) -> Rubric:
    course = load_course()
    return build_rubric(course, list(course.labs), tmp_path_factory.mktemp("rubric"))


def counts(lab: LabRubric, *, heldout: bool) -> dict[str, int]:
    """The lab's score's tests (an optional extension step's apart), visible or held-out."""
    tests = [test for test in lab.main_tests if test.heldout == heldout]
    return {
        "tests": len(tests),
        "points": sum(t.points for t in tests),
        "gpu_tests": sum(t.gpu for t in tests),
        "gpu_points": sum(t.points for t in tests if t.gpu),
    }


def text() -> str:
    return " ".join(README.read_text(encoding="utf-8").split())  # sentences may wrap anywhere


def test_the_readme_table_counts_each_labs_visible_tests_and_points(rubric):
    rows = {
        int(m["lab"]): m
        for m in re.finditer(
            r"\| 0(?P<lab>\d) \| (?P<tests>\d+) tests, (?P<points>\d+) points"
            r"(?: \((?P<gpu_tests>\d+) GPU tests worth (?P<gpu_points>\d+) points\))?",
            text(),
        )
    }
    assert sorted(rows) == [1, 2, 3], "a row per lab"
    for number, lab in enumerate(rubric.labs, start=1):
        want, row = counts(lab, heldout=False), rows[number]
        assert (int(row["tests"]), int(row["points"])) == (want["tests"], want["points"]), f"{lab.lab}: {want}"
        if want["gpu_tests"]:
            assert (int(row["gpu_tests"] or 0), int(row["gpu_points"] or 0)) == (want["gpu_tests"], want["gpu_points"])


def test_the_readme_totals_are_the_rubrics(rubric):
    found = re.search(
        r"\((?P<cpu>\d+) of (?P<all>\d+): (?P<vcpu>\d+) of (?P<vall>\d+) on the visible tests, "
        r"(?P<hcpu>\d+) of (?P<hall>\d+) on the held-out ones; lab 3's (?P<gt>\d+) GPU tests, "
        r"worth (?P<gp>\d+) points",
        text(),
    )
    assert found, "the README states the reference's total"
    visible = [counts(lab, heldout=False) for lab in rubric.labs]
    heldout = [counts(lab, heldout=True) for lab in rubric.labs]
    vall, hall = sum(c["points"] for c in visible), sum(c["points"] for c in heldout)
    vgpu, hgpu = sum(c["gpu_points"] for c in visible), sum(c["gpu_points"] for c in heldout)
    assert {key: int(value) for key, value in found.groupdict().items()} == {
        "cpu": vall + hall - vgpu - hgpu,
        "all": vall + hall,
        "vcpu": vall - vgpu,
        "vall": vall,
        "hcpu": hall - hgpu,
        "hall": hall,
        "gt": sum(c["gpu_tests"] for c in visible + heldout),
        "gp": vgpu + hgpu,
    }


def test_the_readme_counts_the_heldout_tests_of_each_lab(rubric):
    found = re.search(
        r"lab 1: (\d+) tests, (\d+) points; lab 2: (\d+) tests, (\d+) points; lab 3: (\d+) tests, "
        r"(\d+) points, (\d+) of them GPU tests worth (\d+) points",
        text(),
    )
    assert found, "the README states each lab's held-out tests"
    l1, l2, l3 = (counts(lab, heldout=True) for lab in rubric.labs)
    assert [int(value) for value in found.groups()] == [
        l1["tests"],
        l1["points"],
        l2["tests"],
        l2["points"],
        l3["tests"],
        l3["points"],
        l3["gpu_tests"],
        l3["gpu_points"],
    ]


def test_the_readme_states_each_optional_extension_apart(rubric):
    stated = {
        int(m["lab"]): (int(m["tests"]), int(m["points"]))
        for m in re.finditer(
            r"lab (?P<lab>\d)'s optional extensions? \(steps? \d+(?: and \d+)?[^)]*\): (?P<tests>\d+) tests, "
            r"(?P<points>\d+) points",
            text(),
        )
    }
    want = {
        number: (lab.extension_tests, lab.extension_points)
        for number, lab in enumerate(rubric.labs, start=1)
        if lab.extension_tests
    }
    assert want, "the course has an optional extension step (lab 1's step 10)"
    assert stated == want, "the README names each lab's optional extension, its tests and points, apart from the totals"


def test_each_handout_that_counts_its_graded_tests_counts_the_rubrics(rubric):
    """A lab's handout may say how many graded tests it has ("145 graded tests worth 218 points"): the
    visible tests of its score, as the README's table counts them (lab 1's said 128 and 199 for months)."""
    directories, checked = {spec.id: spec.directory for spec in load_course().labs}, 0
    for lab in rubric.labs:
        handout = directories[lab.lab] / "README.md"
        handout_text = " ".join(handout.read_text(encoding="utf-8").split())
        for match in re.finditer(r"(?P<tests>\d+) graded tests worth (?P<points>\d+) points", handout_text):
            want = counts(lab, heldout=False)
            assert (int(match["tests"]), int(match["points"])) == (want["tests"], want["points"]), (
                f"{handout}: {match[0]!r}, the rubric has {want['tests']} tests worth {want['points']} points"
            )
            checked += 1
    assert checked, "lab 1's handout counts its graded tests"
