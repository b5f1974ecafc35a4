"""Synthetic graded folders: made-up students, as ``grader run`` would leave them.

Used by the report's browser check and the grader's benchmark (instructor tools).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from grader.course.rubric import LabRubric, Rubric, RubricTest, TalkingPointSpec
from grader.evidence.layout import EVENTS_FILE, RAW_DIR, REPORT_FILE, RUBRIC_FILE, RUN_FILE, SUBMISSION_FILE


def synthetic_rubric(labs: int = 3, tests: int = 20) -> Rubric:
    """``labs`` labs of ``tests`` tests (the last two of each need a GPU), with three talking points each."""
    rubrics = []
    for index in range(labs):
        lab, package = f"lab{index + 1:02d}", f"lab{index + 1:02d}_synthetic"
        cases = tuple(
            RubricTest(f"{package}/test_lab.py::test_{k:02d}", f"test_{k:02d}", 1 + k % 3, k >= tests - 2)
            for k in range(tests)
        )
        points = tuple(
            TalkingPointSpec(f"tp{k}", "talking_point", f"Point {k}?", (f"test_{k:02d}", f"test_{k + 5:02d}"))
            for k in range(3)
        )
        rubrics.append(LabRubric(lab, package, f"Synthetic lab {index + 1}", cases, points))
    return Rubric(tuple(rubrics))


def write_synthetic_student(out: Path, rubric: Rubric, rng: random.Random, skill: float) -> None:
    """Raw artifacts of one student, as ``grader run`` would leave them."""
    out.mkdir(parents=True)
    rubric.write(out / RUBRIC_FILE)
    (out / SUBMISSION_FILE).write_text(json.dumps({"submission": out.name, "gpu": "auto", "flags": [], "notes": []}))
    for lab in rubric.labs:
        raw = out / RAW_DIR / lab.lab
        raw.mkdir(parents=True)
        crash_at = rng.randrange(len(lab.tests)) if rng.random() < 0.05 else None
        events = [{"event": "configure"}, {"event": "collected", "nodeids": [t.nodeid for t in lab.tests]}]
        report_tests = []
        for position, test in enumerate(lab.tests):
            events.append({"event": "start", "nodeid": test.nodeid})
            if position == crash_at:
                break
            outcome = "skipped" if test.gpu else ("passed" if rng.random() < skill else "failed")
            events.append(
                {
                    "event": "report",
                    "nodeid": test.nodeid,
                    "when": "setup",
                    "outcome": "skipped" if test.gpu else "passed",
                    "message": "needs a CUDA GPU" if test.gpu else "",
                }
            )
            if not test.gpu:
                events.append(
                    {
                        "event": "report",
                        "nodeid": test.nodeid,
                        "when": "call",
                        "outcome": outcome,
                        "message": "" if outcome == "passed" else "AssertionError: outputs differ (max abs 0.03)",
                    }
                )
            events.append({"event": "report", "nodeid": test.nodeid, "when": "teardown", "outcome": "passed"})
            events.append({"event": "finish", "nodeid": test.nodeid})
            report_tests.append({"nodeid": test.nodeid, "outcome": outcome})
        if crash_at is None:
            events.append({"event": "session_finish", "exitstatus": 1})
            (raw / REPORT_FILE).write_text(json.dumps({"tests": report_tests}))
        (raw / EVENTS_FILE).write_text("".join(json.dumps(event) + "\n" for event in events))
        (raw / RUN_FILE).write_text(
            json.dumps(
                {
                    "lab": lab.lab,
                    "exit_code": 1 if crash_at is None else -11,
                    "timed_out": False,
                    "output_flooded": False,
                    "wall_s": 2.0,
                }
            )
        )
