"""The results channel: what the probe sends down its pipe, checked event by event and recorded.

The graded process can write anything to the pipe (its code shares the probe's process), so nothing
it sends is taken on trust. :class:`EventRecorder` runs in the supervisor, reads the pipe as the run
goes, and appends to ``events.jsonl`` (a file outside everything the graded process can see) only the
events that fit the run:

- before the process's ``configure`` and after its ``session_finish``: nothing is accepted;
- ``collected`` once; from then on the run order is known (:func:`~grader.evidence.events.run_order`
  of the collected tests and this process's seed), and each ``start`` must name the test at the next
  position of that order (canaries included: the recorder renames a canary's events with
  :func:`~grader.evidence.events.canary_nodeid`);
- on each ``start`` it answers the probe on the verdict pipe whether this item is the test or its
  canary (the probe reads that byte when the call begins), for a *full* canary "run it" like its twin's
  (:func:`~grader.evidence.events.full_canaries`), and on a ``returned`` (the test's body returned; at
  most one per test, before its call report) whether it was the canary after all; on each ``finish``
  whether to go on or
  stop: the **streak rule** is counted here, over real tests only, and its ``stopped`` event is the
  recorder's own (the probe cannot send one);
- ``report`` and ``finish`` only for the test that is running, each phase at most once: **the first
  report of a (test, phase) wins**; a call reported passed whose body never sent its ``returned`` is
  refused (a pass rewritten from a failure: its body raised, so the probe never asked).

Every event refused is recorded as a ``rejected`` event saying what was wrong: the scorer voids a lab
whose stream was tampered with. The recorder also knows which test is running and since when (the
supervisor's watch for tests that overrun their limit), and caps the stream's size.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import IO, Any

from grader.evidence.events import (
    COLLECT_ERROR,
    COLLECTED,
    CONFIGURE,
    FINISH,
    GO_ON,
    INTROSPECTION_EVENT,
    PHASES,
    PROBE_EVENTS,
    REJECTED_EVENT,
    REPORT,
    RETURNED,
    SESSION_FINISH,
    START,
    STOP,
    STOPPED_EVENT,
    VERDICT_CANARY,
    VERDICT_RUN,
    canary_nodeid,
    full_canaries,
    is_canary,
    original_nodeid,
    run_order,
    stop_reason,
)  # fmt: skip

#: Events the probe may send.
ACCEPTED = PROBE_EVENTS
#: Longest line kept; longer ones are refused (the probe's own lines stay far below it).
MAX_LINE_BYTES = 64 * 1024
#: Refusals recorded per process (a flood of forged events is summarised, not copied).
MAX_REJECTIONS = 50


class EventRecorder:
    """Reads one graded process's events and appends the accepted ones to a log (see the module docstring).

    Args:
        log: the open ``events.jsonl`` (shared by the lab part's processes, appended to).
        seed: this process's canary seed (it never leaves the supervisor).
        verdicts: the write end of the verdict pipe (see the module docstring), or None.
        streak: the real tests in a row that ran out of time before this process; ``stops``: the
            streak rule (:meth:`~grader.execute.limits.LabBudget.stops_at`: whether such tests in a row
            stop the run; None: never stop).
        stream_cap_bytes: the most the process may send; past it the rest is dropped and
            :attr:`flooded` is set.
        cost: a test's cost for drawing the full canaries (the reference's seconds on it); None: no full canaries.
        plain: tests whose canary stays plain (one of their canaries was killed in an earlier process).
    """

    def __init__(
        self,
        log: IO[bytes],
        *,
        seed: int,
        stream_cap_bytes: int,
        verdicts: int | None = None,
        streak: Sequence[str] = (),
        stops: Callable[[Sequence[str]], bool] | None = None,
        cost: Callable[[str], float | None] | None = None,
        plain: Collection[str] = (),
    ) -> None:
        self.log, self.seed, self.cap, self.verdicts = log, seed, stream_cap_bytes, verdicts
        self.cost, self.plain = cost, frozenset(plain)
        self.full: frozenset[str] = frozenset()  # tests whose canary is full (chosen when they are collected)
        self.running_full = False  # the running item is a full canary
        self.returned = False  # the running item's body returned (its one ``returned`` came)
        self.last_timed_out: tuple[str, bool] = ("", False)  # the last finished item's test, and if it ran out of time
        self.streak, self.stops = list(streak), stops
        self.timed_out = False  # a phase of the running real test reported the grader's time limit
        self.order: list[tuple[str, bool]] | None = None
        self.position = 0  # the next start's index in ``order``
        self.running: tuple[str, float] | None = None  # recorded node id, monotonic start
        self.phases: set[str] = set()
        self.setup_done: float | None = None  # when the running test's setup report came (monotonic)
        self.configured = self.finished = self.flooded = False
        self.rejections = 0
        self.started: list[str] = []  # real tests started (recorded node ids)
        self.received = 0
        self.closed = False
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- reading

    def drain(self, pipe: IO[bytes]) -> None:
        """Read ``pipe`` to its end (run in a thread while the process lives)."""
        for line in iter(lambda: pipe.readline(MAX_LINE_BYTES + 1), b""):
            self.received += len(line)
            if self.received > self.cap:
                if not self.flooded:
                    self.flooded = True
                    self._reject({}, f"the event stream passed {self.cap // (1024 * 1024)} MiB: the rest was dropped")
                continue
            if len(line) > MAX_LINE_BYTES or not line.endswith(b"\n"):
                self._reject({}, "an event line that is too long or unterminated")
                continue
            try:
                event = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self._reject({}, "a line that is not JSON")
                continue
            if isinstance(event, dict):
                self.accept(event)
            else:
                with self._lock:
                    self._reject({}, "a JSON value that is not an event")

    def now_running(self) -> tuple[str, float] | None:
        """The recorded node id of the test running now and when it started (monotonic), or None."""
        with self._lock:
            return self.running

    def call_began(self) -> tuple[str, float] | None:
        """The running test's recorded node id and when its setup was reported done (monotonic): from
        then on it runs its own call. None while no test runs or its setup goes on. Graded code can
        only bring this earlier (by sending the report itself), which shortens its own allowance."""
        with self._lock:
            if self.running is None or self.setup_done is None:
                return None
            return self.running[0], self.setup_done

    # ---------------------------------------------------------------- checking

    def accept(self, event: dict[str, Any]) -> None:
        """Check one event against the run and record it, or record why it was refused."""
        with self._lock:
            why = self._check(event)
            if why:
                self._reject(event, why)
            else:
                self._write(event)

    def _check(self, event: dict[str, Any]) -> str:  # noqa: PLR0911 - one rule per line
        kind = event.get("event")
        if kind not in ACCEPTED:
            return f"an unknown event {str(kind)[:40]!r}"
        if kind == CONFIGURE:
            if self.configured:
                return "a second configure"
            self.configured = True
            return ""
        if not self.configured:
            return f"a {kind} before the process started"
        if self.finished:
            return f"a {kind} after the session's end"
        if kind == SESSION_FINISH:
            self.finished = True
            return "" if self.running is None else "the session ended while a test was running"
        if kind in (COLLECT_ERROR, INTROSPECTION_EVENT):
            return ""
        if kind == COLLECTED:
            if self.order is not None:
                return "a second collected"
            nodeids = event.get("nodeids")
            if not isinstance(nodeids, list) or not all(isinstance(n, str) for n in nodeids):
                return "a collected event without its node ids"
            self.order = run_order(nodeids, self.seed)
            if self.cost is not None:
                self.full = full_canaries([n for n in nodeids if n not in self.plain], self.seed, self.cost)
            return ""
        if self.order is None:
            return f"a {kind} before the tests were collected"
        return self._check_test_event(kind, event)

    def _check_test_event(self, kind: str, event: dict[str, Any]) -> str:
        nodeid = event.get("nodeid")
        if kind == START:
            if self.running is not None:
                return f"a start while {self.running[0]} was running"
            if self.position >= len(self.order):
                return "a start after every test of the run had started"
            expected, canary = self.order[self.position]
            if nodeid != expected:
                return f"a start of {str(nodeid)[:200]!r} where the run order has {expected!r}"
            recorded = canary_nodeid(self.position, expected) if canary else expected
            # A full canary whose twin just ran out of time is plain: nothing was forged in a timeout.
            full = canary and expected in self.full and self.last_timed_out != (expected, True)
            self.position += 1
            self.running, self.phases, self.timed_out = (recorded, time.monotonic()), set(), False
            self.setup_done, self.running_full, self.returned = None, full, False
            if not canary:
                self.started.append(recorded)
            event["nodeid"] = recorded
            if full:
                event["full_canary"] = True
            self._answer(VERDICT_CANARY if canary and not full else VERDICT_RUN)
            return ""
        if self.running is None or nodeid not in (self.running[0], original_nodeid(self.running[0])):
            return f"a {kind} for {str(nodeid)[:200]!r}, which is not running"
        event["nodeid"] = self.running[0]
        if kind == REPORT:
            when = event.get("when")
            if when not in PHASES:
                return f"a report of an unknown phase {str(when)[:40]!r}"
            if when in self.phases:
                return f"a second {when} report for {self.running[0]} (the first one stands)"
            if when == "call" and event.get("outcome") == "passed" and self.verdicts is not None and not self.returned:
                return f"a passed call of {self.running[0]} whose body never returned (the probe asks when it does)"
            self.phases.add(when)
            if when == "setup":
                self.setup_done = time.monotonic()
            self.timed_out = self.timed_out or bool(event.get("timeout"))
            return ""
        if kind == RETURNED:
            if self.returned or "call" in self.phases:
                return f"a returned for {self.running[0]} after its body had returned"
            if is_canary(self.running[0]) and not self.running_full:
                return f"a returned for {self.running[0]}, whose body never runs"
            self.returned = True
            self._answer(VERDICT_CANARY if self.running_full else VERDICT_RUN)
            return ""
        if kind == FINISH:
            finished, self.running = self.running[0], None
            self.last_timed_out = (original_nodeid(finished), self.timed_out)
            self._count_streak(finished)
            return ""
        return f"an unexpected {kind}"

    def _answer(self, byte: bytes) -> None:
        if self.verdicts is None:
            return
        try:
            os.write(self.verdicts, byte)
        except OSError:
            pass  # the process is gone

    def _count_streak(self, finished: str) -> None:
        """After each test: count a real one in the streak, then tell the probe to go on or stop."""
        if is_canary(finished):
            self._answer(GO_ON)
            return
        self.streak = [*self.streak, finished] if self.timed_out else []
        if self.stops is not None and self.stops(self.streak):
            self._write(
                {
                    "event": STOPPED_EVENT,
                    "t": round(time.time(), 3),
                    "streak": len(self.streak),
                    "reason": stop_reason(len(self.streak)),
                }
            )
            self._answer(STOP)
        else:
            self._answer(GO_ON)

    def close(self) -> None:
        """The process is over: whatever still arrives (from a process that escaped it) is ignored."""
        with self._lock:
            self.closed = True

    def end_running(self) -> None:
        """The supervisor killed the running test: no more events are expected for it."""
        with self._lock:
            self.running = None

    # ---------------------------------------------------------------- writing

    def _write(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        if not isinstance(event.get("t"), (int, float)) or isinstance(event.get("t"), bool):
            event = {**event, "t": round(time.time(), 3)}  # an event sent without its time gets the supervisor's
        self.log.write((json.dumps(event, ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace"))
        self.log.flush()

    def _reject(self, event: dict[str, Any], why: str) -> None:
        self.rejections += 1
        if self.rejections <= MAX_REJECTIONS:
            self._write(
                {
                    "event": REJECTED_EVENT,
                    "t": round(time.time(), 3),
                    "reason": why,
                    "kind": str(event.get("event", ""))[:40],
                }
            )


def append_event(log: Path, event: str, **fields: Any) -> None:
    """Add one of the supervisor's own events to a lab's log (no graded process is writing to it then)."""
    with open(log, "ab") as handle:
        handle.write((json.dumps({"event": event, "t": round(time.time(), 3), **fields}) + "\n").encode("utf-8"))
