"""A log of a pytest run that survives the process: what :mod:`labkit.run_lab` resumes from.

A test that crashes the interpreter (a Triton kernel storing out of bounds aborts it with
``Fatal Python error: Aborted``; a segfault in native code; ``os._exit``) ends pytest on the spot:
no summary, no step table, no word of which test it was. So the course plugin, when given
``--labkit-events FILE``, appends one JSON line per event to ``FILE`` with an unbuffered ``os.write``
on an ``O_APPEND`` descriptor (written the moment the call returns, whatever happens next):

- ``configure``: a pytest process started;
- ``start``: a test started (its node id, and for a graded test what the step table needs of it);
- ``finish``: a graded test ended, with its :class:`~labkit.step_summary.TestOutcome`;
- ``session_finish``: the process got to the end of its run;
- ``crashed``: written by the runner, not pytest: the test that was running when the process died.

The runner reads the log after each process: no ``session_finish`` means a crash, and the test
started but never finished is the one that crashed. With ``--labkit-resume`` the plugin leaves out
every test the log shows as started and takes the earlier processes' outcomes (the crashed tests
failed) into its step table, so the last process prints the table of the whole run.
(The grader keeps its own log of the same kind; labkit does not depend on the grader.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.step_summary import FAILED, TestOutcome

CONFIGURE, START, FINISH, SESSION_FINISH, CRASHED = "configure", "start", "finish", "session_finish", "crashed"


@dataclass(frozen=True)
class GradedTest:
    """What the step table needs to know of a graded test case before it has an outcome."""

    folder: str  # the lab folder (the one holding lab.toml)
    function: str
    points: int
    gpu: bool
    heldout: bool


class EventLog:
    """Append-only JSON-lines file written with unbuffered ``os.write`` (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}, default=str) + "\n"
        os.write(self._fd, line.encode("utf-8", "replace"))

    def close(self) -> None:
        os.close(self._fd)


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """Every complete event in the log (a line cut short by a crash is skipped)."""
    events = []
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def last_process(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the last pytest process (from its ``configure`` on), plus the runner's after it."""
    starts = [index for index, event in enumerate(events) if event.get("event") == CONFIGURE]
    return events[starts[-1] :] if starts else []


def finished_session(events: list[dict[str, Any]]) -> bool:
    """True when the last process got to the end of its session (False: it crashed or was killed)."""
    return any(event.get("event") == SESSION_FINISH for event in last_process(events))


def started(events: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Node id -> its ``start`` event, for every test any process started."""
    return {event["nodeid"]: event for event in events if event.get("event") == START}


def unfinished(events: list[dict[str, Any]]) -> list[str]:
    """Tests the last process started and never finished: the one running when it died."""
    process = last_process(events)
    done = {event["nodeid"] for event in process if event.get("event") in (FINISH, CRASHED)}
    return [nodeid for nodeid in started(process) if nodeid not in done]


def graded_of(event: dict[str, Any]) -> GradedTest | None:
    """The graded test a ``start`` event describes (None for a test that is not graded)."""
    graded = event.get("graded")
    return GradedTest(**graded) if graded else None


def earlier_outcomes(events: list[dict[str, Any]]) -> dict[str, tuple[GradedTest, TestOutcome]]:
    """Node id -> (its graded test, its outcome) for every graded test an earlier process finished or crashed in."""
    starts = started(events)
    result: dict[str, tuple[GradedTest, TestOutcome]] = {}
    for event in events:
        kind = event.get("event")
        graded = graded_of(starts.get(event.get("nodeid"), {}))
        if graded is None or kind not in (FINISH, CRASHED):
            continue
        if kind == FINISH and event.get("outcome"):
            result[event["nodeid"]] = (graded, TestOutcome(**event["outcome"]))
        elif kind == CRASHED:
            outcome = TestOutcome(event["nodeid"], graded.function, graded.points, FAILED,
                                  event.get("message", "crashed"), graded.heldout)  # fmt: skip
            result[event["nodeid"]] = (graded, outcome)
    return result


def crashes(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``crashed`` events, in order."""
    return [event for event in events if event.get("event") == CRASHED]
