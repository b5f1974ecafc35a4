"""Recording the reference solution's time on every test, from its graded folder (``grader selfcheck --record-times``).

The grader's time limits come from these recordings (:mod:`grader.course.reference_times` holds their
file form, :mod:`grader.execute.limits` the limits derived from them). A recording is made by grading
the reference alone, with the compilers' caches off and no test cut short (the verb sets that up);
this module reads what that grading left: each test's CPU and wall time from the events of the
visible and held-out runs, and the lab's whole wall time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from grader.course.labs import Course
from grader.course.reference_times import (
    ReferenceTimes,
    merged,
    read_reference_times,
    recorded_here,
    write_reference_times,
)
from grader.course.rubric import Rubric
from grader.evidence.events import read_events
from grader.evidence.layout import EVENTS_FILE, HELDOUT_RUN_DIR, RAW_DIR, RUN_FILE, read_json
from grader.evidence.runs import passed_test_times
from grader.scoring.score import rescore


def record_times(course: Course, rubric: Rubric, graded: Path, gpu: str, log: Callable[[str], Any] = print) -> None:
    """Write each lab's ``reference_times.json`` in ``course`` from the reference's graded folder ``graded``.

    A lab the reference did not pass cleanly keeps its old file (the times would be a failure's times).
    """
    result = rescore(graded)
    for lab in rubric.labs:
        scored = result.lab(lab.lab)
        if lab.error is not None or scored.status != "graded" or scored.score + scored.pending != scored.max_score:
            log(
                f"  {lab.lab}: times NOT recorded: the reference scores {scored.score}/{scored.max_score} "
                f"({scored.status}); fix that first"
            )
            continue
        nodeids = {test.nodeid for test in lab.tests}
        lab_dir = course.root / lab.package
        times = merged(measure(graded, lab.lab, nodeids, gpu), read_reference_times(lab_dir), nodeids)
        path = write_reference_times(lab_dir, times)
        log(
            f"  {lab.lab}: recorded {len(times.tests)} of {len(nodeids)} tests' times "
            f"(sum {sum(times.tests.values()):.1f} s of wall clock, {sum(times.cpu.values()):.1f} s of CPU; whole "
            f"run {times.lab_wall_s:.1f} s) in {lab.package}/{path.name}"
        )


def measure(graded: Path, lab_id: str, nodeids: set[str], gpu: str) -> ReferenceTimes:
    """The times of one lab from the reference's graded folder (``graded/raw/<lab>/`` and its ``heldout/``)."""
    raw = graded / RAW_DIR / lab_id
    record = read_json(raw / RUN_FILE) or {}
    recorded = recorded_here(gpu=gpu, caches="off (every compile from scratch)")
    events = read_events(raw / EVENTS_FILE) + read_events(raw / HELDOUT_RUN_DIR / EVENTS_FILE)
    wall = record.get("wall_s")
    return ReferenceTimes(
        passed_test_times(events, nodeids),
        float(wall) if isinstance(wall, (int, float)) else None,
        recorded,
        passed_test_times(events, nodeids, field="cpu"),
    )
