"""The rubric: every graded test and its points, read from the PRISTINE course, never from a submission.

A submission can delete tests, crash before they run or fake a report; none of that changes what a
lab is worth. The pristine course also holds each lab's **held-out tests** (``<lab>/heldout/``, never in
the student release): they are rubric entries like the others, with a ``visibility`` (``hidden`` or
``after_due_date``, Gradescope's values; ``visible`` for ``test_lab.py``) and an ``area`` that feedback
reports instead of the cases. Visibility is data here, not a separate code path: every test is run,
scored and stored alike, and only what reports show a student depends on it. So the grader collects
each lab's own tests once (``pytest --collect-only`` with :mod:`grader.execute.probe` writing node
ids, points and GPU needs) and scores every run against that list: a test missing from a run scores 0
of its points.

Each test also carries the reference solution's recorded time on it (the lab's ``reference_times.json``,
:mod:`grader.course.reference_times`): time limits derive from it (:mod:`grader.execute.limits`).

Collecting a real lab imports torch and the lab's harness (seconds), so rubrics are cached in
``cache_dir`` under a hash of everything collection depends on: the lab folder, the course's support
files and the probe plugin. A lab whose pristine tests do not collect has an ``error`` instead of tests,
and every submission gets a clear "cannot be graded" line for it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from grader.course.reference_times import ReferenceTimes
from grader.evidence.text import key_lines
from labkit.labspec import VISIBILITIES, VISIBLE, LabSpec, Step

RUBRIC_FILE = "rubric.json"
#: Bumped when the rubric's shape changes, so stale caches are never read.
RUBRIC_VERSION = 5
#: Versions a graded folder's ``rubric.json`` may hold and still be re-scored (4: before the steps were kept).
READABLE_RUBRIC_VERSIONS = (4, RUBRIC_VERSION)


@dataclass(frozen=True)
class RubricTest:
    """One graded test case (a parametrized case is its own entry, with its own points).

    ``reference_s`` and ``reference_cpu_s`` are how long the reference solution takes on it (setup,
    call and teardown), in seconds of the wall clock and of CPU, from the lab's ``reference_times.json``;
    None when it was never timed. Time limits derive from them (:mod:`grader.execute.limits`).
    ``shared_fixtures``: the module-, class-, package- or session-scoped fixtures of the course it
    requests; whichever test comes first builds them, so a test's own time does not bound that build.
    """

    nodeid: str
    name: str
    points: int
    gpu: bool
    visibility: str = VISIBLE
    area: str = ""
    reference_s: float | None = None
    reference_cpu_s: float | None = None
    extension: bool = False
    shared_fixtures: tuple[str, ...] = ()  # "scope:name" of each fixture of a wider scope than a test it requests

    @property
    def heldout(self) -> bool:
        """True for a held-out test (not in the student release; feedback shows its area only)."""
        return self.visibility != VISIBLE


@dataclass(frozen=True)
class TalkingPointSpec:
    """A talking point or interview question and the test functions that give evidence for it."""

    id: str
    kind: str
    text: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class LabRubric:
    """What one lab is worth. ``error`` is set (and ``tests`` empty) when the pristine tests did not collect.

    ``reference_wall_s``: the reference solution's whole run of the lab (start-up included), when timed.
    ``steps``: the handout's steps from ``lab.toml`` (feedback names the step to work on next).
    """

    lab: str
    package: str
    title: str
    tests: tuple[RubricTest, ...] = ()
    talking_points: tuple[TalkingPointSpec, ...] = ()
    error: str | None = None
    reference_wall_s: float | None = None
    steps: tuple[Step, ...] = ()

    @property
    def main_tests(self) -> tuple[RubricTest, ...]:
        """The tests of the lab's score: all but an optional extension step's (``@pytest.mark.extension``)."""
        return tuple(test for test in self.tests if not test.extension)

    @property
    def max_score(self) -> int:
        return sum(test.points for test in self.main_tests)

    @property
    def gpu_points(self) -> int:
        return sum(test.points for test in self.main_tests if test.gpu)

    @property
    def gpu_tests(self) -> int:
        return sum(1 for test in self.main_tests if test.gpu)

    @property
    def heldout_tests(self) -> int:
        return sum(1 for test in self.main_tests if test.heldout)

    @property
    def heldout_points(self) -> int:
        return sum(test.points for test in self.main_tests if test.heldout)

    @property
    def extension_tests(self) -> int:
        return sum(1 for test in self.tests if test.extension)

    @property
    def extension_points(self) -> int:
        """The points of the optional extension step's tests, shown apart from :attr:`max_score`."""
        return sum(test.points for test in self.tests if test.extension)


@dataclass(frozen=True)
class Rubric:
    """The rubric of every lab being graded, in teaching order."""

    labs: tuple[LabRubric, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"version": RUBRIC_VERSION, "labs": [asdict(lab) for lab in self.labs]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Rubric":
        if data.get("version") not in READABLE_RUBRIC_VERSIONS:
            raise ValueError(f"rubric version {data.get('version')!r}, expected {RUBRIC_VERSION}")
        return cls(tuple(_lab_from_dict(lab) for lab in data["labs"]))

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: Path) -> "Rubric":
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))


def describe_rubric(lab: LabRubric) -> str:
    """One line saying what a lab is worth, counting tests and points apart (``lab03: 71 tests worth
    121 points, of which 15 GPU tests worth 32 points (pending without CUDA)``)."""
    if lab.error is not None:
        first, *rest = key_lines(lab.error) or [""]
        return f"{lab.lab}: UNAVAILABLE: {first}" + "".join(f"\n      {line}" for line in rest)
    gpu = (
        "no GPU tests"
        if not lab.gpu_tests
        else (
            f"of which {_count(lab.gpu_tests, 'GPU test')} worth {_count(lab.gpu_points, 'point')} "
            "(pending without CUDA)"
        )
    )
    heldout = (
        f"; {_count(lab.heldout_tests, 'held-out test')} worth {_count(lab.heldout_points, 'point')}"
        if lab.heldout_tests
        else ""
    )
    extension = (
        f"; an optional extension of {_count(lab.extension_tests, 'test')} worth "
        f"{_count(lab.extension_points, 'point')}, apart"
        if lab.extension_tests
        else ""
    )
    return (
        f"{lab.lab}: {_count(len(lab.main_tests), 'test')} worth {_count(lab.max_score, 'point')}, {gpu}{heldout}"
        f"{extension}"
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _lab_from_dict(data: dict[str, Any]) -> LabRubric:
    return LabRubric(
        lab=data["lab"],
        package=data["package"],
        title=data["title"],
        tests=tuple(
            RubricTest(**{**test, "shared_fixtures": tuple(test.get("shared_fixtures", ()))}) for test in data["tests"]
        ),
        talking_points=tuple(
            TalkingPointSpec(p["id"], p["kind"], p["text"], tuple(p["evidence"])) for p in data["talking_points"]
        ),
        error=data.get("error"),
        reference_wall_s=data.get("reference_wall_s"),
        steps=tuple(Step(s["number"], s["title"], tuple(s["files"]), tuple(s["tests"])) for s in data.get("steps", ())),
    )


def _talking_points(spec: LabSpec) -> tuple[TalkingPointSpec, ...]:
    return tuple(TalkingPointSpec(p.id, p.kind, p.text, p.evidence) for p in spec.talking_points)


def parse_collected(spec: LabSpec, collected: dict[str, Any]) -> LabRubric:
    """Build a lab's rubric from the probe's ``--grader-rubric`` output (a pure function).

    Raises:
        ValueError: when a test has no valid points (the course plugin should have refused it).
    """
    tests = []
    for entry in collected["tests"]:
        points = entry["points"]
        if not isinstance(points, int) or isinstance(points, bool) or points <= 0:
            raise ValueError(f"{entry['nodeid']}: points {points!r} is not a positive int")
        visibility = entry.get("visibility", VISIBLE)
        if visibility not in VISIBILITIES:
            raise ValueError(f"{entry['nodeid']}: visibility {visibility!r} is not one of {', '.join(VISIBILITIES)}")
        tests.append(
            RubricTest(
                entry["nodeid"],
                entry["name"],
                points,
                bool(entry["gpu"]),
                visibility,
                str(entry.get("area") or ""),
                extension=bool(entry.get("extension")),
                shared_fixtures=tuple(entry.get("shared_fixtures", ())),
            )
        )
    if not tests:
        raise ValueError(f"{spec.package}: no graded tests were collected")
    return LabRubric(spec.id, spec.package, spec.title, tuple(tests), _talking_points(spec), steps=spec.steps)


def with_reference_times(lab: LabRubric, times: ReferenceTimes | None) -> LabRubric:
    """``lab`` with each test's recorded reference time (unchanged without a record)."""
    if times is None:
        return lab
    tests = tuple(
        replace(test, reference_s=times.tests.get(test.nodeid), reference_cpu_s=times.cpu.get(test.nodeid))
        for test in lab.tests
    )
    return replace(lab, tests=tests, reference_wall_s=times.lab_wall_s)
