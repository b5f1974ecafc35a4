"""The event log of a graded run: its vocabulary, the run order with its canaries, and reading it back.

Inside the graded pytest process the probe (:mod:`grader.execute.probe`) sends one JSON object per
event down a pipe; the supervisor (:mod:`grader.execute.supervisor`) checks each one against the run
order and writes the accepted ones to ``raw/<lab>/events.jsonl``, a file no graded process can see.
The scorer reads only that file. The probe's events:

- ``configure`` (the process started with the grader's plugins), ``collected`` (the real tests, in
  order), ``collect_error``;
- per test: ``start``, one ``report`` per phase (``setup``, ``call``, ``teardown``: outcome,
  message, duration, ``"timeout": true`` when the grader's alarm stopped it), ``finish``; and
  ``returned`` when the test's body returned (the probe's question to the supervisor, below);
- ``session_finish``;
- ``introspection_refused`` (``what``, ``file``, ``line``): a student file asked for a frame, the
  garbage collector's objects, ``ctypes``..., and was refused; the submission is flagged for review.

The supervisor adds its own: ``killed`` (a test overran its limit and did not stop: its process was
killed), ``stopped`` (the streak rule ended the lab), ``rejected`` (an event it refused, with why).

**Canaries.** Every real test runs beside a *canary*: its twin (same name, node id, markers, fixtures
and body) that fails when called. Which twin is the canary follows from a random seed only the
supervisor holds (:func:`run_order`); it tells the probe at the start of each call, over a pipe, so
nothing on disk, on the command line, in the environment or in the graded process's memory before the
call tells a canary from its test. Honest code cannot make a canary pass; code that
rewrites pytest's outcomes makes one pass and the run is void. In the recorded log a canary's events
carry the node id :func:`canary_nodeid` gives it.

A few canaries of each run are *full* (:func:`full_canaries`): the supervisor answers "run it" when
their call begins, and the probe asks again (a ``returned`` event) only if the test's body returned,
when the answer fails it. Code that rewrites the failing reports of the tests that called it (their
body failed, so the probe never asked) rewrites a full canary's too, and the run is void.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

#: The probe's events (see the module docstring).
CONFIGURE, COLLECTED, COLLECT_ERROR = "configure", "collected", "collect_error"
START, REPORT, FINISH, SESSION_FINISH = "start", "report", "finish", "session_finish"
#: The probe's question when a test's body has returned normally (is this twin the canary after all?).
RETURNED = "returned"
#: A student file tried introspection the grading refuses (:mod:`grader.execute.introspection_guard`).
INTROSPECTION_EVENT = "introspection_refused"
PROBE_EVENTS = frozenset(
    {CONFIGURE, COLLECTED, COLLECT_ERROR, START, REPORT, RETURNED, FINISH, SESSION_FINISH, INTROSPECTION_EVENT}
)
#: The supervisor's events.
KILLED_EVENT = "killed"  # the supervisor killed a test that overran its limit and did not stop
STOPPED_EVENT = "stopped"  # the streak rule stopped the lab
OVER_LIMIT_EVENT = "over_limit"  # the supervisor killed a process over a resource cap (the test running then, if any)
REJECTED_EVENT = "rejected"  # an event the supervisor refused (the graded process tampered with its channel)
PHASES = ("setup", "call", "teardown")
#: The supervisor's answers on the verdict pipe: at the start of each call (run it, or fail it: a canary)
#: and after each test (go on, or stop: the streak rule). One byte each.
VERDICT_RUN, VERDICT_CANARY, GO_ON, STOP = b"R", b"C", b"G", b"S"
#: The share of a part's recorded reference time its *full* canaries (:func:`full_canaries`) may take;
#: the part's budget grows by this share of its time limits (:func:`grader.execute.limits.lab_budget`).
FULL_CANARY_SHARE = 0.1
#: The recorded node id of a canary case starts with this.
CANARY_PREFIX = "grader-canary"


def canary_nodeid(position: int, copied: str) -> str:
    """The recorded node id of the canary at ``position`` of the run order, a copy of test ``copied``."""
    return f"{CANARY_PREFIX}#{position}::{copied}"


def is_canary(nodeid: str) -> bool:
    """True for a recorded canary case (see :func:`canary_nodeid`)."""
    return nodeid.startswith(CANARY_PREFIX + "#")


def original_nodeid(recorded: str) -> str:
    """The node id of the test a recorded one runs (a canary's is the test it copies)."""
    return recorded.split("::", 1)[1] if is_canary(recorded) else recorded


def run_order(real: Sequence[str], seed: int) -> list[tuple[str, bool]]:
    """The order a graded process runs its items in: ``(node id, is_canary)`` pairs.

    Every real test runs as a pair of twins, two identical copies, one of which is the test and the
    other its canary; ``seed`` decides which comes first. The probe builds the pairs without knowing
    which is which: the supervisor, which alone holds the seed, tells it at the start of each call.
    Because a canary copies the test beside it, it requests exactly the fixtures (and parameters) its
    twin requests, under its twin's time limit: it never builds a module-, class- or session-scoped
    fixture that its twin would not have built in its place, and never tears one down.
    """
    rng = random.Random(seed)
    order: list[tuple[str, bool]] = []
    for nodeid in real:
        canary_first = rng.random() < 0.5
        order += [(nodeid, canary_first), (nodeid, not canary_first)]
    return order


def full_canaries(
    real: Sequence[str], seed: int, cost: Callable[[str], float | None], share: float = FULL_CANARY_SHARE
) -> frozenset[str]:
    """The tests whose canary runs its twin's whole body before it fails: a *full* canary.

    A plain canary fails before it calls anything, so code that rewrites only the failing reports of
    tests that called it spares every plain canary. A full canary calls the submission exactly as its
    twin does, and the graded process learns that it was the canary only if the body returned: a body
    that failed is reported the same way either way, so rewriting its report rewrites the canary's too.

    Chosen with ``seed`` (the supervisor's alone) in a random order: tests are added while their costs
    (``cost``: the reference's recorded seconds on a test, None where it was never timed) stay within
    ``share`` of all the timed tests'; when none fits (a part of a few tests, or none timed), the
    cheapest one (a random one of the cheapest; an untimed one only where no test was timed) is chosen,
    so every part has one.
    """
    rng = random.Random(f"full-canaries-{seed}")
    shuffled = list(dict.fromkeys(real))
    rng.shuffle(shuffled)
    timed = {nodeid: seconds for nodeid in shuffled if (seconds := cost(nodeid)) is not None}
    allowance = share * sum(timed.values())
    chosen: list[str] = []
    spent = 0.0
    for nodeid, seconds in timed.items():
        if spent + seconds <= allowance:
            chosen.append(nodeid)
            spent += seconds
    if not chosen and shuffled:
        chosen.append(min(timed, key=timed.__getitem__) if timed else shuffled[0])
    return frozenset(chosen)


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


def timeout_streak(events: Iterable[dict[str, Any]], skip: Callable[[str], bool] = is_canary) -> list[str]:
    """The real tests in a row, counting back from the last one that ended, that ran out of time (in run order).

    A test ran out of time when a phase reported the grader's time limit (``"timeout": true``) or
    when the supervisor killed it (a ``killed`` event). Canaries (``skip(nodeid)``) are ignored. The
    streak rule (:meth:`grader.execute.limits.LabBudget.stops_at`) reads how many they are and which
    handout steps they belong to.
    """
    streak: list[str] = []
    timed_out: set[str] = set()
    for event in events:
        nodeid, kind = event.get("nodeid"), event.get("event")
        if not isinstance(nodeid, str) or skip(nodeid):
            continue
        if kind == REPORT and event.get("timeout"):
            timed_out.add(nodeid)
        elif kind == KILLED_EVENT:
            streak.append(nodeid)
        elif kind == FINISH:
            streak = [*streak, nodeid] if nodeid in timed_out else []
    return streak


def stop_reason(streak: int, remaining: int | None = None) -> str:
    """The lab's reason when the streak rule stopped it."""
    rest = f"the remaining {remaining} tests were" if remaining else "the rest of the lab was"
    return f"{streak} tests in a row ran out of time, so {rest} not run (they score 0); fix the hang and grade again"
