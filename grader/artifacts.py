"""The layout of a graded submission's folder, and reading a lab's raw run back as plain data.

::

    OUT/
      summary.json          the scored result (grader.results.SubmissionResult)
      feedback.md           the student's feedback
      results.json          Gradescope's format
      rubric.json           the rubric this submission was scored against
      submission.json       what the sandbox took and what it flagged (tampering, missing files)
      raw/<lab>/run.json    how the lab's pytest process ended (grader.runner.RunRecord)
      raw/<lab>/limits.json every test's time limit and how it was derived (grader.budget)
      raw/<lab>/events.jsonl, report.json (report.1.json... after a resume), output.txt

Everything :mod:`grader.score` needs is in ``rubric.json``, ``submission.json`` and ``raw/``: a regrade
(new scoring rules, a fixed rubric) reads these files and never runs a student's code again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUMMARY_FILE = "summary.json"
FEEDBACK_FILE = "feedback.md"
GRADESCOPE_FILE = "results.json"
RUBRIC_FILE = "rubric.json"
SUBMISSION_FILE = "submission.json"
RAW_DIR = "raw"
RUN_FILE = "run.json"
LIMITS_FILE = "limits.json"
EVENTS_FILE = "events.jsonl"
REPORT_FILE = "report.json"
OUTPUT_FILE = "output.txt"
#: How much of a run's console output the scorer quotes in a reason.
OUTPUT_TAIL_CHARS = 1500


@dataclass(frozen=True)
class LabRun:
    """Everything one lab's pytest process left behind, as plain data: the scorer's input.

    Attributes:
        lab: the lab id.
        exit_code: the process's exit status (negative: killed by that signal; None: unknown).
        timed_out: the grader killed it at the per-lab wall-clock limit.
        output_flooded: the grader killed it for printing too much.
        wall_s: how long it ran.
        canary: name of the canary test injected into this run.
        events: the probe's event log, in order.
        report: pytest-json-report's report, or None when the process died before writing it.
        output_tail: the end of the console output.
        lab_timeout_s: the per-lab limit the run had (for messages).
        resumed_reports: the reports of the pytest processes resumed after a killed test, in order
            (None for one that died before writing it); ``report`` is the first process's.
    """

    lab: str
    exit_code: int | None
    timed_out: bool
    output_flooded: bool
    wall_s: float
    canary: str
    events: tuple[dict[str, Any], ...]
    report: dict[str, Any] | None
    output_tail: str = ""
    lab_timeout_s: float | None = None
    resumed_reports: tuple[dict[str, Any] | None, ...] = ()

    @property
    def reports(self) -> tuple[dict[str, Any] | None, ...]:
        """One report (or None) per pytest process, in the order they ran."""
        return (self.report, *self.resumed_reports)


def report_file(process: int) -> str:
    """The JSON report's file name of the lab's ``process``-th pytest process (0: the first)."""
    return REPORT_FILE if process == 0 else REPORT_FILE.replace(".json", f".{process}.json")


def is_canary(test_name: str, canary: str) -> bool:
    """True when ``test_name`` (a node id or a function name) is one of the grader's canary cases."""
    return test_name.split("::")[-1].split("[")[0] == canary


def read_events(path: Path) -> tuple[dict[str, Any], ...]:
    """Parse a JSON-lines event log, skipping a torn last line (the process may have died mid-write)."""
    if not path.is_file():
        return ()
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    try:  # fast path: one parse for the whole log (a class of 1,000 has ~100,000 lines)
        parsed = json.loads("[" + ",".join(lines) + "]")
        return tuple(event for event in parsed if isinstance(event, dict))
    except json.JSONDecodeError:
        pass
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return tuple(events)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None when the file is missing, torn or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def write_submission_meta(out: Path, meta: dict[str, Any]) -> None:
    """Write ``out/submission.json``: who was graded, the GPU mode, flags, notes, why labs did not run."""
    (out / SUBMISSION_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def load_lab_run(raw_dir: Path) -> LabRun | None:
    """Read ``raw/<lab>/`` back; None when the lab was never run (no ``run.json``)."""
    record = read_json(raw_dir / RUN_FILE)
    if record is None:
        return None
    processes = int(record.get("processes") or 1)
    output = raw_dir / OUTPUT_FILE
    tail = output.read_text(encoding="utf-8", errors="replace")[-OUTPUT_TAIL_CHARS:] if output.is_file() else ""
    return LabRun(
        lab=record["lab"],
        exit_code=record.get("exit_code"),
        timed_out=bool(record.get("timed_out")),
        output_flooded=bool(record.get("output_flooded")),
        wall_s=float(record.get("wall_s", 0.0)),
        canary=record["canary"],
        events=read_events(raw_dir / EVENTS_FILE),
        report=read_json(raw_dir / REPORT_FILE),
        output_tail=tail,
        lab_timeout_s=record.get("lab_timeout_s"),
        resumed_reports=tuple(read_json(raw_dir / report_file(index)) for index in range(1, processes)),
    )


def load_lab_runs(out: Path, lab_ids: list[str]) -> dict[str, LabRun | None]:
    """Every lab's run under ``out/raw`` (None for a lab that was not run)."""
    return {lab: load_lab_run(out / RAW_DIR / lab) for lab in lab_ids}
