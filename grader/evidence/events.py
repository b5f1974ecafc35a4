"""The event log of a graded run: its event names, reading it back, and the rules read from it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


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


#: Event names the grader adds to a lab's event log (besides the probe's own).
KILLED_EVENT = "killed"  # the supervisor killed a test that overran its limit and did not stop



STOPPED_EVENT = "stopped"  # the streak rule stopped the lab



def timeout_streak(events: Iterable[dict[str, Any]], is_canary: Callable[[str], bool]) -> int:
    """How many real tests in a row, counting back from the last one that ended, ran out of time.

    A test ran out of time when a phase reported the grader's time limit (``"timeout": true``) or
    when the supervisor killed it (a ``killed`` event). Canaries (``is_canary(nodeid)``) are ignored.
    """
    streak = 0
    timed_out: set[str] = set()
    for event in events:
        nodeid, kind = event.get("nodeid"), event.get("event")
        if not isinstance(nodeid, str) or is_canary(nodeid):
            continue
        if kind == "report" and event.get("timeout"):
            timed_out.add(nodeid)
        elif kind == KILLED_EVENT:
            streak += 1
        elif kind == "finish":
            streak = streak + 1 if nodeid in timed_out else 0
    return streak



def stop_reason(streak: int, remaining: int | None = None) -> str:
    """The lab's reason when the streak rule stopped it."""
    rest = f"the remaining {remaining} tests were" if remaining else "the rest of the lab was"
    return (f"{streak} tests in a row ran out of time, so {rest} not run (they score 0); "
            "fix the hang and grade again")
