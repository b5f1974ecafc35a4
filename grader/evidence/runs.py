"""One lab's raw run read back as plain data (the scorer's input)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.evidence.events import read_events
from grader.evidence.layout import EVENTS_FILE, OUTPUT_FILE, RAW_DIR, REPORT_FILE, RUN_FILE, read_json, report_file

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


def passed_test_times(events: tuple[dict[str, Any], ...], nodeids: set[str]) -> dict[str, float]:
    """Seconds of every test of ``nodeids`` whose phases all passed, from a probe event log (pure)."""
    durations: dict[str, float] = {}
    failed: set[str] = set()
    for event in events:
        nodeid = event.get("nodeid")
        if event.get("event") != "report" or nodeid not in nodeids:
            continue
        if event.get("outcome") != "passed":
            failed.add(nodeid)
        durations[nodeid] = durations.get(nodeid, 0.0) + float(event.get("duration") or 0.0)
    return {nodeid: round(seconds, 3) for nodeid, seconds in durations.items() if nodeid not in failed}
