"""Full canaries: a canary that runs its twin's body, and is told it was the canary only if that body returned.

A plain canary fails before it calls anything, so code that rewrites only the failing reports of tests
that called it (the corpus's ``attack_forges_only_its_callers``) spared every one of them and earned
every point. These tests hold the protocol that closes it: the supervisor's answers on the verdict
pipe, the choice of full canaries, and the scorer's reading of a report a full canary shares.
"""

from __future__ import annotations

import io
import json
import os

from grader.evidence.events import (
    COLLECTED,
    CONFIGURE,
    FINISH,
    REJECTED_EVENT,
    REPORT,
    RETURNED,
    START,
    VERDICT_CANARY,
    VERDICT_RUN,
    canary_nodeid,
    full_canaries,
)  # fmt: skip
from grader.execute.channel import EventRecorder
from grader.scoring.score import score_lab
from grader.tests.scoring.test_score import ALL_CPU, RUBRIC, failed, node, passed, run_of

TESTS = [f"lab/test_lab.py::test_{n}" for n in range(10)]


def test_full_canaries_stay_within_their_share_of_the_references_time_and_every_part_has_one():
    """Drawn by their limits, 21 of lab 3's full canaries took 57 s where its tests took 120 s: a test that
    compiles in a subprocess has the floor's limit and 27 s of wall clock. Drawn by the reference's time now,
    over the timed tests only: 19 GPU tests never timed on CPU had counted 1,500 s each, and 131 of 149 drew."""
    one_second = lambda nodeid: 1.0  # noqa: E731
    chosen = full_canaries(TESTS, seed=3, cost=one_second)
    assert len(chosen) == 1, "10% of ten equal costs: one test"
    assert full_canaries(TESTS, seed=3, cost=one_second) == chosen, "the seed decides"
    assert len({full_canaries(TESTS, seed, one_second) for seed in range(30)}) > 5, "and different seeds differ"
    assert len(full_canaries(TESTS[:2], seed=0, cost=one_second)) == 1, "a lab of two tests still has one"
    costs = {nodeid: (100.0 if n == 0 else 1.0) for n, nodeid in enumerate(TESTS)}  # a slow compile, nine quick
    for seed in range(30):
        chosen = full_canaries(TESTS, seed, costs.__getitem__)
        assert TESTS[0] not in chosen and 1 <= len(chosen) <= 10, "within 10% of the reference's time: 10.9 s"
    few = {TESTS[0]: 30.0, TESTS[1]: 20.0, TESTS[2]: 0.5}
    assert full_canaries(list(few), seed=0, cost=few.__getitem__) == {TESTS[2]}, "none fits: the cheapest"
    gpu = {nodeid: (None if n < 5 else 1.0) for n, nodeid in enumerate(TESTS)}  # five never timed here
    for seed in range(30):
        chosen = full_canaries(TESTS, seed, gpu.__getitem__)
        assert len(chosen) == 1 and gpu[next(iter(chosen))] == 1.0, "untimed tests neither count nor are drawn"
    assert len(full_canaries(TESTS, seed=0, cost=lambda nodeid: None)) == 1, "nothing timed: one all the same"
    assert full_canaries([], seed=0, cost=one_second) == frozenset()


class Supervisor:
    """An :class:`EventRecorder` with a real verdict pipe, read as the probe reads it."""

    def __init__(self, tests: list[str], seed: int = 11, **options) -> None:
        self.read_end, write_end = os.pipe()
        self.log = io.BytesIO()
        self.recorder = EventRecorder(self.log, seed=seed, stream_cap_bytes=1 << 20, verdicts=write_end, **options)
        self.recorder.accept({"event": CONFIGURE})
        self.recorder.accept({"event": COLLECTED, "nodeids": tests})

    def send(self, event: str, nodeid: str, **fields) -> bytes:
        """Send one event; the verdict byte it was answered with (b"" when none)."""
        self.recorder.accept({"event": event, "nodeid": nodeid, **fields})
        os.set_blocking(self.read_end, False)
        try:
            return os.read(self.read_end, 1)
        except BlockingIOError:
            return b""

    def events(self) -> list[dict]:
        """What the recorder wrote to its log."""
        return [json.loads(line) for line in self.log.getvalue().splitlines()]

    def rejections(self) -> list[str]:
        return [event["reason"] for event in self.events() if event["event"] == REJECTED_EVENT]


def test_a_full_canary_is_told_run_then_fails_only_when_its_body_returned():
    supervisor = Supervisor(TESTS, cost=lambda nodeid: 1.0)
    (full,) = supervisor.recorder.full
    kinds = []
    for position, (nodeid, canary) in enumerate(supervisor.recorder.order):
        verdict = supervisor.send(START, nodeid)
        if canary and nodeid != full:
            assert verdict == VERDICT_CANARY, "a plain canary fails when its call begins"
            kinds.append("plain")
        else:
            assert verdict == VERDICT_RUN, "the test and a full canary both run: nothing tells them apart"
            after = supervisor.send(RETURNED, nodeid)
            assert after == (VERDICT_CANARY if canary else VERDICT_RUN), (position, nodeid, canary)
            kinds.append("full" if canary else "real")
        supervisor.send(REPORT, nodeid, when="call", outcome="failed")
        supervisor.send(FINISH, nodeid)
    assert sorted(kinds) == sorted(["real"] * 10 + ["plain"] * 9 + ["full"])
    assert supervisor.rejections() == []
    starts = [event for event in supervisor.events() if event["event"] == START and event.get("full_canary")]
    assert [event["nodeid"].split("::", 1)[1] for event in starts] == [full], "the log marks the full canary"


def test_a_returned_the_run_never_asked_for_is_refused():
    supervisor = Supervisor(TESTS, cost=lambda nodeid: 1.0)
    (full,) = supervisor.recorder.full
    nodeid, canary = supervisor.recorder.order[0]
    supervisor.send(START, nodeid)
    plain_canary = canary and nodeid != full
    supervisor.send(RETURNED, nodeid)
    if not plain_canary:
        assert supervisor.send(RETURNED, nodeid) == b"", "a second question gets no answer"
        assert "after its body had returned" in supervisor.rejections()[0]
    else:
        assert "whose body never runs" in supervisor.rejections()[0]


def test_a_full_canary_whose_twin_ran_out_of_time_is_plain():
    """Nothing is forged in a timeout, and a body that hung once would hang twice: that costs its limit again."""
    for seed in range(40):
        supervisor = Supervisor(TESTS, seed=seed, cost=lambda nodeid: 1.0)
        (full,) = supervisor.recorder.full
        position = [n for n, _ in supervisor.recorder.order].index(full)
        if not supervisor.recorder.order[position][1]:  # the real test comes first
            break
    for nodeid, _ in supervisor.recorder.order[: position + 1]:
        supervisor.send(START, nodeid)
        supervisor.send(REPORT, nodeid, when="call", outcome="failed", timeout=nodeid == full)
        supervisor.send(FINISH, nodeid)
    assert supervisor.send(START, full) == VERDICT_CANARY


def test_a_test_one_of_whose_canaries_was_killed_gets_plain_canaries_after():
    supervisor = Supervisor(TESTS, cost=lambda nodeid: 1.0, plain=TESTS[1:])
    assert supervisor.recorder.full == {TESTS[0]}


def test_a_pass_stands_on_the_event_log_where_a_full_canary_shares_the_report_entry():
    """A full canary whose body failed is reported under its twin's node id (it never learns what it was):
    pytest-json-report may then show the twin's entry failed, which must not take a pass away."""
    test_a = node("test_a")
    full_start = {"event": START, "nodeid": canary_nodeid(1, test_a), "full_canary": True}
    canary = [full_start, *failed(canary_nodeid(1, test_a))[1:]]
    shared = run_of(passed(test_a), canary, *(passed(n) for n in ALL_CPU[1:]), report_passed=ALL_CPU[1:])
    assert {t.nodeid: t.outcome for t in score_lab(RUBRIC, shared).tests}[test_a] == "passed"
    plain = run_of(*(passed(n) for n in ALL_CPU), report_passed=ALL_CPU[1:])
    assert {t.nodeid: t.outcome for t in score_lab(RUBRIC, plain).tests}[test_a] == "failed", (
        "without a full canary, the final report must still confirm every pass"
    )


def test_a_pass_whose_body_never_returned_is_refused():
    """Code that knows which twin was a plain canary (it never called the submission) can rewrite the
    other twin's failure alone: no canary passes, but that pass came without its body's ``returned``."""
    supervisor = Supervisor(TESTS, cost=lambda nodeid: 1.0)
    nodeid, _ = supervisor.recorder.order[0]
    supervisor.send(START, nodeid)
    supervisor.send(REPORT, nodeid, when="setup", outcome="passed")
    supervisor.send(REPORT, nodeid, when="call", outcome="passed")
    assert "whose body never returned" in supervisor.rejections()[0]


def test_tampering_in_one_part_voids_the_whole_lab():
    """A visible part voided (a canary passed) while forged held-out passes kept their points: 5/16 void."""
    from dataclasses import replace

    from grader.evidence.runs import LabRuns
    from grader.tests.scoring.test_score import RubricTest

    heldout = RubricTest("labX_demo/heldout/test_heldout.py::test_more", "test_more", 4, False, "hidden", "more")
    rubric = replace(RUBRIC, tests=(*RUBRIC.tests, heldout))
    forged = run_of(*(passed(n) for n in ALL_CPU), passed(canary_nodeid(0, ALL_CPU[0])), report_passed=ALL_CPU)
    honest_looking = run_of(passed(heldout.nodeid), report_passed=[heldout.nodeid], heldout=True)
    lab = score_lab(rubric, LabRuns(forged, honest_looking))
    assert (lab.status, lab.score) == ("void", 0)
    assert {test.outcome for test in lab.tests} == {"void"} and lab.heldout.score == 0


def test_a_full_canary_that_ends_the_process_crashes_its_test():
    """os._exit in clamp, drawn full and run first: its test never started, and was scored "not-run"."""
    test_a = node("test_a")
    dying = [
        {"event": START, "nodeid": canary_nodeid(0, test_a), "full_canary": True},
        {"event": REPORT, "nodeid": canary_nodeid(0, test_a), "when": "setup", "outcome": "passed"},
    ]
    lab = score_lab(RUBRIC, run_of(dying, finished=False, report_passed=[]))
    assert {t.nodeid: t.outcome for t in lab.tests}[test_a] == "crashed"
