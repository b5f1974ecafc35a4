"""The grader's pytest plugin, loaded into every graded run with ``-p grader.execute.probe``.

It does four small jobs inside the pytest process that runs a student's code:

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
4. **Per-test time limits** (``--grader-limits FILE``, written by :mod:`grader.execute.supervisor` from
   :mod:`grader.execute.limits`). An alarm (``SIGALRM``) armed while the test's setup, call and teardown run
   (not while pytest reports them) raises :class:`TestTimeLimit` in the test's code when its limit passes. This replaces pytest-timeout,
   whose signal method raises pytest's ``Failed``: Hypothesis catches that like any test failure and
   re-runs the example to shrink it, which hangs again with no alarm left, so one hanging property
   test used to hang the whole lab. ``TestTimeLimit`` derives from ``BaseException`` (like
   ``KeyboardInterrupt``), which Hypothesis, ``except Exception`` and ``pytest.raises(Exception)`` all
   let through, so the test fails at once and alone. Its report event carries ``"timeout": true``.
   After ``max_consecutive_timeouts`` tests in a row timed out, the plugin stops the session and logs a
   ``stopped`` event (the streak rule). Code that swallows even a ``BaseException``, or hangs in native
   code, is killed from outside by the runner, which then resumes pytest with ``--grader-resume``: the
   plugin drops the tests the event log shows as already started (``--grader-timeout-streak`` carries
   the streak over).

Nothing here imports the student's code or torch; the plugin is tiny so that it cannot fail on its own.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from grader.evidence.events import STOPPED_EVENT, is_canary, read_events, stop_reason

#: Longest failure message kept per event (the full text stays in the raw JSON report, truncated).
MESSAGE_LIMIT = 2000
#: The least time a phase gets once a test's limit is spent (a teardown after a timed-out call).
MIN_PHASE_S = 1.0


class TestTimeLimit(BaseException):
    """Raised in a test's code when it runs past its time limit (see the module docstring)."""

    __test__ = False  # not a pytest test class


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grader", "course autograder (internal)")
    group.addoption("--grader-events", default=None, help="append one JSON line per test event to this file")
    group.addoption("--grader-rubric", default=None, help="write the collected tests' points as JSON here")
    group.addoption("--grader-canary", default=None, help="name of the always-failing canary test to interleave")
    group.addoption("--grader-limits", default=None, help="per-test time limits (JSON written by the runner)")
    group.addoption("--grader-resume", action="store_true", help="skip the tests the event log shows as started")
    group.addoption("--grader-timeout-streak", type=int, default=0, help="tests in a row that already timed out")


class EventLog:
    """Append-only JSON-lines file written with unbuffered ``os.write`` (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "t": round(time.time(), 3), **fields}, default=str) + "\n"
        os.write(self._fd, line.encode("utf-8", "replace"))


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


class TimeKeeper:
    """The per-test alarm and the streak rule (see the module docstring)."""

    def __init__(self, limits: dict[str, Any], canary: str | None, streak: int) -> None:
        self.tests = {nodeid: float(entry["limit_s"]) for nodeid, entry in limits.get("tests", {}).items()}
        self.basis = {nodeid: str(entry.get("basis", "")) for nodeid, entry in limits.get("tests", {}).items()}
        self.default = float(limits.get("default_test_s", 60.0))
        self.max_streak = int(limits.get("max_consecutive_timeouts", 0)) or None
        self.canary, self.streak = canary, streak
        self.timed_out: set[str] = set()
        self.has_alarm = hasattr(signal, "setitimer")  # not on Windows: the runner's kill still applies

    def begin(self, nodeid: str) -> None:
        """A new test: its whole limit is left, shared by its setup, call and teardown."""
        limit = self.tests.get(nodeid, self.default)
        basis = f" ({self.basis[nodeid]})" if self.basis.get(nodeid) else ""
        self.left = limit
        self.message = f"this test ran over its time limit of {limit:g} s{basis}"

    def arm(self) -> None:
        """Start the alarm for one phase with what is left of the test's limit (at least a second, so that
        a teardown after a timed-out call still runs)."""
        if not self.has_alarm:
            return
        message = self.message

        def on_alarm(signum: int, frame: Any) -> None:
            raise TestTimeLimit(message)

        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, max(self.left, MIN_PHASE_S))
        self.phase_start = time.monotonic()

    def disarm(self) -> None:
        if self.has_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            self.left -= time.monotonic() - self.phase_start

    def finished(self, nodeid: str) -> str | None:
        """Count ``nodeid``'s outcome in the streak; return the stop reason when the streak is complete."""
        if self.canary and is_canary(nodeid, self.canary):
            return None
        self.streak = self.streak + 1 if nodeid in self.timed_out else 0
        if self.max_streak and self.streak >= self.max_streak:
            return stop_reason(self.streak)
        return None


_log: EventLog | None = None
_clock: TimeKeeper | None = None
_session: pytest.Session | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _log, _clock
    path = config.getoption("--grader-events")
    if path:
        _log = EventLog(path)
        _emit("configure", pid=os.getpid())
    limits = config.getoption("--grader-limits")
    if limits:
        with open(limits, encoding="utf-8") as handle:
            _clock = TimeKeeper(json.load(handle), config.getoption("--grader-canary"),
                                config.getoption("--grader-timeout-streak"))


def pytest_sessionstart(session: pytest.Session) -> None:
    global _session
    _session = session


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
    if config.getoption("--grader-resume") and config.getoption("--grader-events"):
        log = Path(config.getoption("--grader-events"))
        started = {event.get("nodeid") for event in read_events(log) if event.get("event") == "start"}
        done = [item for item in items if item.nodeid in started and not (canary and is_canary(item.nodeid, canary))]
        if done:
            items[:] = [item for item in items if item not in done]
            config.hook.pytest_deselected(items=done)
    if canary:
        items[:] = interleave_canaries(items, canary)
    rubric_path = config.getoption("--grader-rubric")
    if rubric_path:
        entries = [rubric_entry(item) for item in items]
        with open(rubric_path, "w", encoding="utf-8") as handle:
            json.dump({"tests": entries}, handle, indent=1)
    _emit("collected", nodeids=[item.nodeid for item in items])


def _timed_phase(begin: bool):
    """A phase hook wrapper running the test's code (fixtures, the test) under the alarm.

    Only the phases are timed, not pytest's reporting between them: an exception raised there would
    be a pytest INTERNALERROR that ends the session, while inside a phase pytest reports it as that
    phase's failure, and the next test runs.
    """

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def wrapper(item: pytest.Item):
        if _clock is None:
            yield
            return
        if begin:
            _clock.begin(item.nodeid)
        _clock.arm()
        try:
            yield
        finally:
            _clock.disarm()

    return wrapper


pytest_runtest_setup = _timed_phase(begin=True)
pytest_runtest_call = _timed_phase(begin=False)
pytest_runtest_teardown = _timed_phase(begin=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if call.excinfo is not None and call.excinfo.errisinstance(TestTimeLimit):
        report = outcome.get_result()
        report.grader_timeout = True
        if _clock is not None:
            _clock.timed_out.add(item.nodeid)


def pytest_runtest_logstart(nodeid: str) -> None:
    _emit("start", nodeid=nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    timeout = {"timeout": True} if getattr(report, "grader_timeout", False) else {}
    _emit(
        "report",
        nodeid=report.nodeid,
        when=report.when,
        outcome=report.outcome,
        message=short_message(report) if not report.passed else "",
        duration=round(report.duration, 4),
        **timeout,
    )


def pytest_runtest_logfinish(nodeid: str) -> None:
    _emit("finish", nodeid=nodeid)
    reason = _clock.finished(nodeid) if _clock is not None else None
    if reason and _session is not None:
        _emit(STOPPED_EVENT, streak=_clock.streak, reason=reason)
        _session.shouldstop = reason


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _emit("session_finish", exitstatus=int(exitstatus))
