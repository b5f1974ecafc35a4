"""The scored result of a submission: plain dataclasses that round-trip through ``summary.json``.

``summary.json`` (schema ``grader-summary/1``)::

    {"schema": "grader-summary/1", "submission": "alice", "gpu": "auto",
     "labs": {"lab01": {"title", "package", "score", "max_score", "pending", "status", "reason",
                        "wall_s", "tests": [{"nodeid", "name", "points", "max_points", "gpu",
                                             "outcome", "message"}, ...],
                        "talking_points": [{"id", "kind", "text", "evidence", "status", "tests"}]}},
     "total": {"score", "max_score", "pending"},
     "flags": ["..."], "notes": ["..."]}

Test outcomes: ``passed`` (full points), ``pending`` (a GPU test graded on a machine without one: its
points are shown separately), and, worth 0: ``failed``, ``error`` (setup/teardown), ``timeout``,
``skipped``, ``crashed`` (the process died during it), ``not-run``, ``void`` (the run was voided).

Lab statuses: ``graded`` (pytest finished), ``crashed``, ``timeout``, ``collection-error`` (the
student's code broke test collection), ``void`` (the canary passed), ``not-run``, and the two that are
never the student's fault: ``unavailable`` (the pristine lab cannot be graded) and ``grader-error``
(the grader itself failed: its plugin did not load, its output folder could not be written, a bug).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA = "grader-summary/1"
PASSED, PENDING = "passed", "pending"
GRADER_ERROR, UNAVAILABLE = "grader-error", "unavailable"
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

    __test__ = False  # not a pytest test class


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


@dataclass(frozen=True)
class SubmissionResult:
    """The whole submission's result: what ``summary.json`` holds."""

    submission: str
    gpu: str
    labs: tuple[LabResult, ...]
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def total(self) -> dict[str, int]:
        return {
            "score": sum(lab.score for lab in self.labs),
            "max_score": sum(lab.max_score for lab in self.labs),
            "pending": sum(lab.pending for lab in self.labs),
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
            entry = {key: value for key, value in vars(lab).items() if key not in ("lab", "tests", "talking_points")}
            entry["tests"] = [dict(vars(test)) for test in lab.tests]
            entry["talking_points"] = [{**vars(point), "evidence": list(point.evidence), "tests": dict(point.tests)}
                                       for point in lab.talking_points]
            labs[lab.lab] = entry
        return {"schema": SCHEMA, "submission": self.submission, "gpu": self.gpu, "labs": labs,
                "total": self.total, "flags": list(self.flags), "notes": list(self.notes)}

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
            fields = {k: v for k, v in entry.items() if k not in ("tests", "talking_points")}
            labs.append(LabResult(lab=lab_id, tests=tests, talking_points=points, **fields))
        return cls(data["submission"], data["gpu"], tuple(labs), tuple(data.get("flags", ())),
                   tuple(data.get("notes", ())))
