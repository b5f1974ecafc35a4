"""One part of a lab's raw run (its visible tests, or its held-out tests) read back as plain data.

This is the scorer's input. Everything in it was written by the supervisor (:mod:`grader.execute.supervisor`)
after checking it, except the JSON reports, which pytest-json-report wrote inside the graded process
and which can therefore only ever take a pass away (:mod:`grader.scoring.score`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.evidence.events import read_events
from grader.evidence.layout import (
    EVENTS_FILE,
    HELDOUT_RUN_DIR,
    OUTPUT_FILE,
    RAW_DIR,
    REPORT_FILE,
    RUN_FILE,
    read_json,
    report_file,
)  # fmt: skip

#: How much of a run's console output the scorer quotes in a reason.
OUTPUT_TAIL_CHARS = 1500


@dataclass(frozen=True)
class LabRun:
    """Everything one part of a lab's run left behind, as plain data.

    Attributes:
        lab: the lab id.
        heldout: the held-out tests' part (its messages are never shown to students).
        exit_code: the last process's exit status (negative: killed by that signal; None: unknown).
        timed_out: the grader killed it at the part's wall-clock budget.
        output_flooded: the grader killed it for printing too much.
        wall_s: how long it ran.
        events: the supervisor's record of the events, in order.
        report: pytest-json-report's report, or None when the process died before writing it.
        output_tail: the end of the console output.
        lab_timeout_s: the part's budget (for messages).
        resumed_reports: the reports of the processes started again after a killed test, in order
            (None for one that died before writing it); ``report`` is the first process's.
        isolation: how the processes were isolated (``bubblewrap`` or ``none``).
        report_problems: why the supervisor did not keep some process's JSON report (graded code made
            it a link, a FIFO, too large, too deep...): the submission's doing, said in the lab's reason.
    """

    lab: str
    exit_code: int | None
    timed_out: bool
    output_flooded: bool
    wall_s: float
    events: tuple[dict[str, Any], ...]
    report: dict[str, Any] | None
    heldout: bool = False
    output_tail: str = ""
    lab_timeout_s: float | None = None
    resumed_reports: tuple[dict[str, Any] | None, ...] = ()
    isolation: str = "none"
    report_problems: tuple[str, ...] = ()

    @property
    def reports(self) -> tuple[dict[str, Any] | None, ...]:
        """One report (or None) per pytest process, in the order they ran."""
        return (self.report, *self.resumed_reports)


@dataclass(frozen=True)
class LabRuns:
    """A lab's two parts: its visible tests' run and its held-out tests' run (None: not run)."""

    visible: LabRun | None
    heldout: LabRun | None = None


def report_shape_problem(report: Any) -> str:
    """Why a parsed pytest-json-report is not one the scorer can read ("" when it is): an object whose
    ``tests`` (when present) is a list of objects, each with a string ``nodeid`` and ``outcome``."""
    if not isinstance(report, dict):
        return "it is not a JSON object"
    tests = report.get("tests", [])
    if not isinstance(tests, list):
        return "its tests are not a list"
    if not all(
        isinstance(test, dict) and isinstance(test.get("nodeid"), str) and isinstance(test.get("outcome"), str)
        for test in tests
    ):
        return "a test in it has no node id or outcome"
    return ""


def read_report(path: Path) -> dict[str, Any] | None:
    """A kept JSON report, or None when there is none or it is not one the scorer can read."""
    report = read_json(path)
    return report if report is not None and not report_shape_problem(report) else None


def load_lab_run(raw_dir: Path) -> LabRun | None:
    """Read one part's folder back (``raw/<lab>/`` or ``raw/<lab>/heldout/``); None when it never ran."""
    record = read_json(raw_dir / RUN_FILE)
    if record is None:
        return None
    processes = int(record.get("processes") or 1)
    output = raw_dir / OUTPUT_FILE
    tail = output.read_text(encoding="utf-8", errors="replace")[-OUTPUT_TAIL_CHARS:] if output.is_file() else ""
    return LabRun(
        lab=record["lab"],
        heldout=bool(record.get("heldout")),
        exit_code=record.get("exit_code"),
        timed_out=bool(record.get("timed_out")),
        output_flooded=bool(record.get("output_flooded")),
        wall_s=float(record.get("wall_s", 0.0)),
        events=read_events(raw_dir / EVENTS_FILE),
        report=read_report(raw_dir / REPORT_FILE),
        output_tail=tail,
        lab_timeout_s=record.get("lab_timeout_s"),
        resumed_reports=tuple(read_report(raw_dir / report_file(index)) for index in range(1, processes)),
        isolation=str(record.get("isolation") or "none"),
        report_problems=tuple(str(problem) for problem in record.get("report_problems") or ()),
    )


def load_lab_runs(out: Path, lab_ids: list[str]) -> dict[str, LabRuns | None]:
    """Every lab's runs under ``out/raw`` (None for a lab that was not run at all)."""
    runs: dict[str, LabRuns | None] = {}
    for lab in lab_ids:
        visible = load_lab_run(out / RAW_DIR / lab)
        heldout = load_lab_run(out / RAW_DIR / lab / HELDOUT_RUN_DIR)
        runs[lab] = None if visible is None and heldout is None else LabRuns(visible, heldout)
    return runs


def passed_test_times(
    events: tuple[dict[str, Any], ...], nodeids: set[str], field: str = "duration"
) -> dict[str, float]:
    """Seconds of every test of ``nodeids`` whose phases all passed, from a recorded event log (pure).

    ``field``: ``duration`` (the wall clock) or ``cpu`` (CPU time, as the probe measures it).
    """
    durations: dict[str, float] = {}
    failed: set[str] = set()
    for event in events:
        nodeid = event.get("nodeid")
        if event.get("event") != "report" or nodeid not in nodeids:
            continue
        if event.get("outcome") != "passed":
            failed.add(nodeid)
        durations[nodeid] = durations.get(nodeid, 0.0) + float(event.get(field) or 0.0)
    return {nodeid: round(seconds, 3) for nodeid, seconds in durations.items() if nodeid not in failed}
