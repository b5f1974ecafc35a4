"""Run one lab's pytest in its own process, with limits, and keep everything it left behind.

This is the only place the grader starts student code. One lab = one subprocess (or a few, see below):

- its own **process group** (``start_new_session``), so a kill takes the whole tree (pytest plus
  anything the student's code started) with one ``killpg``;
- **per-test time limits** from the reference's recorded times (:mod:`grader.execute.limits`), enforced twice:
  inside pytest by :mod:`grader.execute.probe` (an alarm that fails the test and lets the lab go on),
  and from outside by :func:`supervise`, which watches the event log: a test still running a grace
  period after its limit (its code swallowed the alarm, or hangs in native code where no Python signal
  handler runs) has its process group killed, a ``killed`` event is logged, and pytest **resumes**
  with the tests not yet started (``--grader-resume``). Each resumed process writes its own
  ``report.<n>.json``;
- a **lab budget** over all those processes (wall clock), and the **streak rule**: after
  ``max_consecutive_timeouts`` tests in a row ran out of time the lab is stopped (``stopped`` event);
- ``PYTHONPATH`` = the sandbox, which shadows the course's editable install (setuptools' editable finder
  sits *after* the path finder on ``sys.meta_path``);
- a scrubbed environment: no ``PYTEST_ADDOPTS``/``PYTEST_PLUGINS`` from the caller, ``LABKIT_IMPL=student``,
  and with ``gpu="off"`` no visible CUDA device (GPU tests skip and are graded as pending);
- console output goes to a file that a watchdog caps while the run goes on, and is trimmed to its head
  and tail afterwards; the JSON report is rewritten with long strings shortened when it is huge.

Artifacts in ``raw_dir``: ``run.json`` (commands, exit code, timing, what was killed), ``limits.json``
(every test's limit and why), ``events.jsonl`` (:mod:`grader.execute.probe`, plus the supervisor's
``killed``/``stopped`` events), ``report.json`` (pytest-json-report, absent after a crash; resumed
processes write ``report.1.json``...), ``output.txt``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.evidence.events import KILLED_EVENT, STOPPED_EVENT, is_canary, read_events, stop_reason, timeout_streak
from grader.evidence.layout import EVENTS_FILE, LIMITS_FILE, OUTPUT_FILE, RUN_FILE, report_file
from grader.evidence.text import shorten_strings, trim_file
from grader.execute.command import REPORT_OMIT, pytest_command, pytest_env
from grader.execute.limits import LabBudget, RunLimits, lab_budget

if TYPE_CHECKING:
    from grader.course.rubric import LabRubric


@dataclass(frozen=True)
class RunRecord:
    """How one lab's pytest processes ended (``run.json``).

    ``timed_out``: the lab budget ran out; ``killed_tests``: tests killed for overrunning their limit
    (pytest resumed after each); ``stopped``: why the streak rule stopped the lab ("" if it did not).
    """

    lab: str
    package: str
    command: list[str]
    exit_code: int | None
    timed_out: bool
    output_flooded: bool
    wall_s: float
    canary: str
    lab_timeout_s: float
    processes: int = 1
    killed_tests: tuple[str, ...] = ()
    stopped: str = ""


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def overrun_grace_s(limit_s: float) -> float:
    """How long past its limit a test may take to unwind the in-process alarm before it is killed."""
    return 5.0 + 0.1 * limit_s


class TestWatch:
    """Follows a lab's event log while pytest runs and tells which test overran its limit.

    The log is read incrementally (only new lines); the running test is the last ``start`` not followed
    by its ``finish`` (or ``killed``), and its clock starts when the watch first sees it.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, events: Path, budget: LabBudget) -> None:
        self.events, self.budget = events, budget
        self._offset = 0
        self._running: tuple[str, float] | None = None

    def overrun(self) -> str | None:
        """The node id of the test running past its limit plus grace, or None."""
        self._read_new_events()
        if self._running is None:
            return None
        nodeid, since = self._running
        limit = self.budget.limit(nodeid)
        return nodeid if time.monotonic() - since > limit + overrun_grace_s(limit) else None

    def _read_new_events(self) -> None:
        try:
            with open(self.events, "rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except FileNotFoundError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a torn last line is read on the next call
        self._offset += len(complete)
        for line in complete.decode("utf-8", "replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = event.get("event")
            if kind == "start":
                self._running = (str(event.get("nodeid")), time.monotonic())
            elif kind in ("finish", KILLED_EVENT, "configure"):  # a new process starts with no test running
                self._running = None


@dataclass
class Supervised:
    """How one supervised process ended (see :func:`supervise`)."""

    exit_code: int | None
    timed_out: bool = False
    flooded: bool = False
    overrun: str | None = None  # node id of the test killed for overrunning its limit


def supervise(command: list[str], *, cwd: Path, env: dict[str, str], output: Path, limits: RunLimits,
              deadline: float, watch: TestWatch | None = None, append: bool = False) -> Supervised:
    """Run ``command`` in its own process group until it exits or must be killed.

    It is killed (the whole group) when the wall clock passes ``deadline`` (``time.monotonic()``), when
    its output passes ``limits.output_cap_bytes``, or when ``watch`` reports a test past its limit.
    The exit code is negative for a signal (``-11`` = segfault) and None only if waiting failed.
    """
    ended = Supervised(exit_code=None)
    with open(output, "ab" if append else "wb") as sink:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while process.poll() is None:
                if time.monotonic() > deadline:
                    ended.timed_out = True
                elif output.stat().st_size > limits.output_cap_bytes:
                    ended.flooded = True
                elif watch is not None:
                    ended.overrun = watch.overrun()
                if ended.timed_out or ended.flooded or ended.overrun:
                    _kill_group(process)
                    break
                time.sleep(0.05)
            ended.exit_code = process.wait(timeout=30)
        finally:
            if process.poll() is None:
                _kill_group(process)
                process.wait()
            _kill_group(process)  # children the student's code left behind in the group
    return ended


def _append_event(path: Path, event: str, **fields) -> None:
    """Add the supervisor's own event to the log (only ever while no pytest process is writing to it)."""
    with open(path, "ab+") as handle:
        torn = handle.tell() > 0 and handle.seek(-1, os.SEEK_END) >= 0 and handle.read(1) != b"\n"
        line = json.dumps({"event": event, "t": round(time.time(), 3), **fields}) + "\n"
        handle.write((("\n" if torn else "") + line).encode("utf-8"))


def _not_started(events: Path, nodeids: list[str]) -> list[str]:
    started = {event.get("nodeid") for event in read_events(events) if event.get("event") == "start"}
    return [nodeid for nodeid in nodeids if nodeid not in started]


def run_lab(sandbox: Path, lab: LabRubric, raw_dir: Path, *, canary: str, gpu: str, limits: RunLimits,
            python: str = sys.executable, threads: int | None = None) -> RunRecord:
    """Run one lab's graded tests in ``sandbox`` and store the artifacts in ``raw_dir``.

    pytest is resumed after every test killed for overrunning its limit (see the module docstring),
    until the lab is done, its budget is spent or the streak rule stops it.

    Both paths may be relative to this process's working directory: they are made absolute here,
    because pytest runs with the sandbox as its working directory.
    """
    sandbox, raw_dir = sandbox.absolute(), raw_dir.absolute()
    raw_dir.mkdir(parents=True, exist_ok=True)
    for stale in (*raw_dir.glob("report*.json"), raw_dir / EVENTS_FILE, raw_dir / OUTPUT_FILE):
        stale.unlink(missing_ok=True)
    budget = lab_budget(lab, limits)
    limits_file = raw_dir / LIMITS_FILE
    limits_file.write_text(json.dumps(budget.to_dict(), indent=1) + "\n", encoding="utf-8")
    events = raw_dir / EVENTS_FILE
    start = time.monotonic()
    watch = TestWatch(events, budget)
    killed: list[str] = []
    stopped = ""
    commands: list[list[str]] = []
    streak = 0
    while True:
        command = pytest_command(
            python, lab.package, sandbox,
            "--grader-events", str(events),
            "--grader-canary", canary,
            "--grader-limits", str(limits_file),
            *(["--grader-resume", "--grader-timeout-streak", str(streak)] if killed else []),
            "--json-report", "--json-report-file", str(raw_dir / report_file(len(commands))),
            "--json-report-omit", *REPORT_OMIT,
            "-q", "-p", "no:randomly", "-p", "no:timeout",
        )
        commands.append(command)
        ended = supervise(command, cwd=sandbox, env=pytest_env(sandbox, gpu, threads), output=raw_dir / OUTPUT_FILE,
                          limits=limits, deadline=start + budget.lab_s, watch=watch, append=len(commands) > 1)
        if ended.overrun is None:
            break
        killed.append(ended.overrun)
        limit = budget.limit(ended.overrun)
        _append_event(events, KILLED_EVENT, nodeid=ended.overrun, limit_s=limit)
        streak = timeout_streak(read_events(events), lambda nodeid: is_canary(nodeid, canary))
        remaining = _not_started(events, [test.nodeid for test in lab.tests])
        if budget.stops_at(streak):
            stopped = stop_reason(streak, len(remaining))
            _append_event(events, STOPPED_EVENT, streak=streak, reason=stopped)
            break
        if not remaining:
            break
    wall = time.monotonic() - start
    trim_file(raw_dir / OUTPUT_FILE, limits.output_keep_bytes)
    for index in range(len(commands)):
        _shrink_report(raw_dir / report_file(index), limits.report_cap_bytes)
    record = RunRecord(lab.lab, lab.package, commands[0], ended.exit_code, ended.timed_out, ended.flooded,
                       round(wall, 3), canary, budget.lab_s, len(commands), tuple(killed), stopped)
    (raw_dir / RUN_FILE).write_text(json.dumps(asdict(record), indent=1) + "\n", encoding="utf-8")
    return record


def _shrink_report(path: Path, cap: int) -> None:
    """Rewrite a huge JSON report with long strings shortened (an unreadable one is left as it is)."""
    if not path.is_file() or path.stat().st_size <= cap:
        return
    try:
        report = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError:
        trim_file(path, cap)
        return
    path.write_text(json.dumps(shorten_strings(report, 4000)), encoding="utf-8")
