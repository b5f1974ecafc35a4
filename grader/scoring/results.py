"""The scored result of a submission: plain dataclasses that round-trip through ``summary.json``.

``summary.json`` (schema ``grader-summary/1``)::

    {"schema": "grader-summary/1", "submission": "alice", "gpu": "auto",
     "labs": {"lab01": {"title", "package", "score", "max_score", "pending", "status", "reason",
                        "wall_s", "visible": {"score", "max_score", "pending"}, "heldout": {...}, "extension": {...},
                        "steps": [{"number", "title", "files", "tests"}, ...],
                        "tests": [{"nodeid", "name", "points", "max_points", "gpu",
                                   "outcome", "message", "visibility", "area"}, ...],
                        "talking_points": [{"id", "kind", "text", "evidence", "status", "tests"}]}},
     "total": {"score", "max_score", "pending", "visible": {...}, "heldout": {...}, "extension": {...}},
     "flags": ["..."], "notes": ["..."]}

``visible`` and ``heldout`` split a score between the tests students hold (``test_lab.py``) and the
held-out tests (visibility ``hidden`` or ``after_due_date``); they are derived from ``tests``, stored
for readers of the file. ``summary.json`` is instructor data: it names every held-out case. What a
student may read is ``feedback.md`` (held-out results by area only) and Gradescope's ``results.json``
(held-out cases carry their visibility, so Gradescope hides them).

An optional **extension** step (its tests marked ``@pytest.mark.extension``, visible to students) is
scored by the same rules and reported apart: its points are in ``extension``, never in ``score`` or
``max_score``, so a student who skips it can still earn every point of the lab.

Test outcomes: ``passed`` (full points), ``pending`` (a GPU test graded on a machine without one: its
points are shown separately), and, worth 0: ``failed``, ``error`` (setup/teardown), ``timeout``,
``skipped``, ``crashed`` (the process died during it), ``not-run``, ``void`` (the run was voided).

Lab statuses: ``graded`` (pytest finished), ``crashed``, ``timeout`` (the lab's time budget ran out),
``stopped`` (too many tests in a row ran out of time: the rest was not run), ``collection-error`` (the
student's code broke test collection), ``void`` (the canary passed), ``not-run``, ``bad-submission`` (the
submission could not be read: not a folder or a ``.zip``, or a zip that is empty, encrypted, corrupt,
unsafe or over the archive limits; the reason says which), and the two that are
never the student's fault: ``unavailable`` (the pristine lab cannot be graded) and ``grader-error``
(the grader itself failed: its plugin did not load, its output folder could not be written, a bug).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labkit.labspec import VISIBLE, Step

SCHEMA = "grader-summary/1"
PASSED, PENDING = "passed", "pending"
GRADER_ERROR, UNAVAILABLE = "grader-error", "unavailable"
#: The submission itself could not be read (its reason says why): the student's to fix, scored 0.
BAD_SUBMISSION = "bad-submission"
#: Lab statuses caused by the grader or the course, not the submission: the run exits with EXIT_GRADER_FAULT.
GRADER_FAULTS = frozenset({GRADER_ERROR, UNAVAILABLE})
#: Exit statuses of the grading verbs: graded; graded, but the grader failed on some lab; nothing graded.
EXIT_OK, EXIT_GRADER_FAULT, EXIT_USAGE = 0, 1, 2
#: Talking-point statuses.
EVIDENCE_PASSED, EVIDENCE_PENDING, NOT_YET = "evidence: passed", "evidence: pending (GPU)", "not yet"


@dataclass(frozen=True)
class TestResult:
    """One graded test case's outcome."""

    nodeid: str
    name: str
    points: int
    max_points: int
    gpu: bool
    outcome: str
    message: str = ""
    visibility: str = VISIBLE
    area: str = ""
    extension: bool = False

    __test__ = False  # not a pytest test class

    @property
    def heldout(self) -> bool:
        return self.visibility != VISIBLE


@dataclass(frozen=True)
class Points:
    """A score, its maximum and its pending GPU points: of a lab or a submission, or of part of one."""

    score: int
    max_score: int
    pending: int

    @classmethod
    def of(cls, tests: "tuple[TestResult, ...] | list[TestResult]") -> "Points":
        return cls(
            sum(t.points for t in tests),
            sum(t.max_points for t in tests),
            sum(t.max_points for t in tests if t.outcome == PENDING),
        )

    @classmethod
    def total(cls, parts: "list[Points]") -> "Points":
        return cls(sum(p.score for p in parts), sum(p.max_score for p in parts), sum(p.pending for p in parts))

    def to_dict(self) -> dict[str, int]:
        return {"score": self.score, "max_score": self.max_score, "pending": self.pending}


@dataclass(frozen=True)
class TalkingPointResult:
    """A talking point and whether its evidence tests passed."""

    id: str
    kind: str
    text: str
    evidence: tuple[str, ...]
    status: str
    tests: dict[str, str] = field(default_factory=dict)  # evidence test case -> outcome


@dataclass(frozen=True)
class LabResult:
    """One lab's score; ``max_score`` always comes from the pristine rubric."""

    lab: str
    title: str
    package: str
    score: int
    max_score: int
    pending: int
    status: str
    reason: str = ""
    wall_s: float = 0.0
    tests: tuple[TestResult, ...] = ()
    talking_points: tuple[TalkingPointResult, ...] = ()
    #: the handout's steps (``lab.toml``), so that feedback can name the step to work on next.
    steps: tuple[Step, ...] = ()

    @property
    def visible(self) -> Points:
        """The points of the tests students hold (``test_lab.py``), an optional extension's apart."""
        return Points.of([test for test in self.tests if not test.heldout and not test.extension])

    @property
    def heldout(self) -> Points:
        """The points of the held-out tests."""
        return Points.of([test for test in self.tests if test.heldout and not test.extension])

    @property
    def extension(self) -> Points:
        """The points of the optional extension step's tests: shown apart, never in :attr:`score`."""
        return Points.of([test for test in self.tests if test.extension])


#: Keys of a lab's ``summary.json`` entry derived from its tests (written for readers, not read back).
DERIVED_LAB_KEYS = ("visible", "heldout", "extension")


@dataclass(frozen=True)
class SubmissionResult:
    """The whole submission's result: what ``summary.json`` holds."""

    submission: str
    gpu: str
    labs: tuple[LabResult, ...]
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> dict[str, Any]:
        """``score``, ``max_score``, ``pending``, and the same three for ``visible`` and ``heldout`` tests
        and for the optional ``extension`` steps' (which ``score`` leaves out)."""
        return {
            "score": sum(lab.score for lab in self.labs),
            "max_score": sum(lab.max_score for lab in self.labs),
            "pending": sum(lab.pending for lab in self.labs),
            "visible": Points.total([lab.visible for lab in self.labs]).to_dict(),
            "heldout": Points.total([lab.heldout for lab in self.labs]).to_dict(),
            "extension": Points.total([lab.extension for lab in self.labs]).to_dict(),
        }

    @property
    def grader_faults(self) -> tuple[LabResult, ...]:
        """The labs that were not graded because of the grader or the course (see :data:`GRADER_FAULTS`)."""
        return tuple(lab for lab in self.labs if lab.status in GRADER_FAULTS)

    def lab(self, lab_id: str) -> LabResult:
        for lab in self.labs:
            if lab.lab == lab_id:
                return lab
        raise KeyError(f"no lab {lab_id!r} in this result")

    def to_dict(self) -> dict[str, Any]:
        # Built by hand, not with dataclasses.asdict: a class of 1,000 is re-scored in seconds, and
        # asdict's recursive deep copy was the largest cost.
        labs = {}
        for lab in self.labs:
            entry = {
                key: value for key, value in vars(lab).items() if key not in ("lab", "tests", "talking_points", "steps")
            }
            entry["steps"] = [
                {**vars(step), "files": list(step.files), "tests": list(step.tests)} for step in lab.steps
            ]
            entry["visible"], entry["heldout"] = lab.visible.to_dict(), lab.heldout.to_dict()
            entry["extension"] = lab.extension.to_dict()
            entry["tests"] = [dict(vars(test)) for test in lab.tests]
            entry["talking_points"] = [
                {**vars(point), "evidence": list(point.evidence), "tests": dict(point.tests)}
                for point in lab.talking_points
            ]
            labs[lab.lab] = entry
        return {
            "schema": SCHEMA,
            "submission": self.submission,
            "gpu": self.gpu,
            "labs": labs,
            "total": self.total,
            "flags": list(self.flags),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SubmissionResult":
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a grader summary (schema {data.get('schema')!r}, expected {SCHEMA})")
        labs = []
        for lab_id, entry in data["labs"].items():
            tests = tuple(TestResult(**test) for test in entry.get("tests", ()))
            points = tuple(
                TalkingPointResult(p["id"], p["kind"], p["text"], tuple(p["evidence"]), p["status"], dict(p["tests"]))
                for p in entry.get("talking_points", ())
            )
            steps = tuple(
                Step(s["number"], s["title"], tuple(s["files"]), tuple(s["tests"])) for s in entry.get("steps", ())
            )
            fields = {
                k: v for k, v in entry.items() if k not in ("tests", "talking_points", "steps", *DERIVED_LAB_KEYS)
            }
            labs.append(LabResult(lab=lab_id, tests=tests, talking_points=points, steps=steps, **fields))
        return cls(
            data["submission"], data["gpu"], tuple(labs), tuple(data.get("flags", ())), tuple(data.get("notes", ()))
        )
