"""The grader's pytest plugin, loaded into every graded run with ``-p grader.pytest_probe``.

It does three small jobs inside the pytest process that runs a student's code:

1. **An event log that survives crashes** (``--grader-events FILE``). pytest-json-report writes its
   report only when the session ends, so a student's ``os._exit(0)``, a segfault or a killed process
   leaves no report at all. This plugin appends one JSON line per event (test started, each phase's
   outcome, test finished, session finished) with an unbuffered ``os.write`` on an ``O_APPEND``
   descriptor: what was written is in the kernel the moment the call returns, whatever happens to the
   process next. The grader scores from this log, cross-checked with the final report when there is one.
2. **Interleaved canaries** (``--grader-canary NAME``). The grader appends a parametrized test
   ``NAME`` that always fails to the sandbox's ``test_lab.py``; this plugin places one canary case
   after every real test. Honest code cannot make a canary pass; code that patched pytest's runner
   in-process (to report failures as passes) makes the next canary "pass", and the grader voids the run.
3. **The rubric** (``--grader-rubric FILE``, used with ``--collect-only`` on the pristine course):
   every collected test's node id, function name, points, GPU need, visibility and area, written as JSON.

Nothing here imports the student's code or torch; the plugin is tiny so that it cannot fail on its own.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

#: Longest failure message kept per event (the full text stays in the raw JSON report, truncated).
MESSAGE_LIMIT = 2000


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grader", "course autograder (internal)")
    group.addoption("--grader-events", default=None, help="append one JSON line per test event to this file")
    group.addoption("--grader-rubric", default=None, help="write the collected tests' points as JSON here")
    group.addoption("--grader-canary", default=None, help="name of the always-failing canary test to interleave")


class EventLog:
    """Append-only JSON-lines file written with unbuffered ``os.write`` (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "t": round(time.time(), 3), **fields}, default=str) + "\n"
        os.write(self._fd, line.encode("utf-8", "replace"))


_log: EventLog | None = None


def _emit(event: str, **fields: Any) -> None:
    if _log is not None:
        _log.write(event, **fields)


def short_message(report: pytest.TestReport | pytest.CollectReport) -> str:
    """One readable line or paragraph saying why a phase did not pass (the skip reason for skips)."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        return str(longrepr[2])[:MESSAGE_LIMIT]
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message[:MESSAGE_LIMIT]
    return str(longrepr)[-MESSAGE_LIMIT:]  # a collection traceback: the error is at its end


def pytest_configure(config: pytest.Config) -> None:
    global _log
    path = config.getoption("--grader-events")
    if path:
        _log = EventLog(path)
        _emit("configure", pid=os.getpid())


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _emit("collect_error", nodeid=report.nodeid, message=short_message(report))


def interleave_canaries(items: list[pytest.Item], canary: str) -> list[pytest.Item]:
    """Return ``items`` with one canary case after each real test (spare canaries go last)."""
    canaries = [item for item in items if getattr(item, "originalname", item.name) == canary]
    real = [item for item in items if getattr(item, "originalname", item.name) != canary]
    ordered: list[pytest.Item] = []
    for index, item in enumerate(real):
        ordered.append(item)
        if index < len(canaries):
            ordered.append(canaries[index])
    ordered.extend(canaries[len(real) :])
    return ordered


def _marker_arg(item: pytest.Item, name: str, default: Any = None) -> Any:
    marker = item.get_closest_marker(name)
    return marker.args[0] if marker is not None and marker.args else default


def rubric_entry(item: pytest.Item) -> dict[str, Any]:
    """What the grader needs to know about one collected test (the course plugin has set ``visibility``)."""
    return {
        "nodeid": item.nodeid,
        "name": getattr(item, "originalname", item.name),
        "points": _marker_arg(item, "points"),
        "gpu": item.get_closest_marker("gpu") is not None,
        "visibility": _marker_arg(item, "visibility", "visible"),
        "area": _marker_arg(item, "area", ""),
    }


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # trylast: the course plugin has already validated every points marker by now.
    canary = config.getoption("--grader-canary")
    if canary:
        items[:] = interleave_canaries(items, canary)
    rubric_path = config.getoption("--grader-rubric")
    if rubric_path:
        entries = [rubric_entry(item) for item in items]
        with open(rubric_path, "w", encoding="utf-8") as handle:
            json.dump({"tests": entries}, handle, indent=1)
    _emit("collected", nodeids=[item.nodeid for item in items])


def pytest_runtest_logstart(nodeid: str) -> None:
    _emit("start", nodeid=nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _emit(
        "report",
        nodeid=report.nodeid,
        when=report.when,
        outcome=report.outcome,
        message=short_message(report) if not report.passed else "",
        duration=round(report.duration, 4),
    )


def pytest_runtest_logfinish(nodeid: str) -> None:
    _emit("finish", nodeid=nodeid)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _emit("session_finish", exitstatus=int(exitstatus))
