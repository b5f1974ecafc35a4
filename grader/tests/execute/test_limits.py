"""Time budgets (pure functions) and the reference times they come from; the hang fixtures of the corpus
(``hangs_in_one_function``, ``hangs_everywhere``, ``swallows_timeout``, ``slow_but_correct``) show them at work."""

from __future__ import annotations

import io
import os
from dataclasses import replace

import pytest

from grader.course.reference_times import (
    TIMES_FILE,
    ReferenceTimes,
    merged,
    read_reference_times,
    write_reference_times,
)
from grader.course.rubric import LabRubric, Rubric, RubricTest, with_reference_times
from grader.evidence.events import (
    COLLECTED,
    CONFIGURE,
    FINISH,
    GO_ON,
    KILLED_EVENT,
    REPORT,
    START,
    STOP,
    STOPPED_EVENT,
    canary_nodeid,
    timeout_streak,
)
from grader.evidence.runs import passed_test_times
from grader.execute.channel import EventRecorder, original_nodeid
from grader.execute.limits import RunLimits, lab_budget, limit_for_test, submission_budget_s, time_limit_args
from grader.execute.supervisor import SharedFixtureBuilders, overran, overrun_grace_s
from labkit.labspec import Step

LIMITS = RunLimits()  # 10 x the reference's CPU time, at least 10 s; backstop 5 x that; 300 s unmeasured


def lab_with(*reference_s: float | None, wall: float | None = None, cpu: tuple | None = None) -> LabRubric:
    cpus = cpu or (None,) * len(reference_s)
    tests = tuple(
        RubricTest(f"labX/test_lab.py::test_{i}", f"test_{i}", 1, False, reference_s=ref, reference_cpu_s=c)
        for i, (ref, c) in enumerate(zip(reference_s, cpus))
    )
    return LabRubric("labX", "labX", "Demo", tests, reference_wall_s=wall)


def _limit(wall: float | None, cpu: float | None = None, limits: RunLimits = LIMITS):
    return limit_for_test(RubricTest("t::x", "x", 1, False, reference_s=wall, reference_cpu_s=cpu), limits)


def test_a_test_gets_a_multiple_of_the_references_cpu_time_with_a_floor_and_a_wall_clock_backstop():
    assert (_limit(0.05).cpu_s, _limit(0.05).wall_s) == (10.0, 50.0), "fast tests get the floor"
    limit = _limit(9.0, cpu=3.7)
    assert (limit.cpu_s, limit.wall_s) == (37.0, 185.0), "the CPU time is what counts, not the wall clock"
    assert limit.basis == "10 x the reference solution's 3.7 s of CPU time; a wall-clock backstop of 185 s"
    assert _limit(3.7).cpu_s == 37.0, "an older recording's wall time stands in for the CPU time"
    assert _limit(None).cpu_s == 300.0 and "never timed" in _limit(None).basis
    assert _limit(3.7, limits=RunLimits(test_timeout_s=30)).cpu_s == 30.0
    assert "under 1 ms" in _limit(0.0001).basis
    assert _limit(1.0, limits=RunLimits(wall_factor=2)).wall_s == 20.0


def full_canaries_allowance(*walls: float) -> float:
    """What full canaries may add to a part: 10% of its limits, and one test whatever its limit."""
    return 0.1 * sum(walls) + max(walls)


def test_the_lab_budget_is_the_sum_of_its_tests_backstops_plus_full_canaries_plus_start_up():
    lab = lab_with(0.1, 2.0, None, wall=12.1)  # start-up = 12.1 - 2.1 = 10 s, x 10 = 100 s
    budget = lab_budget(lab, LIMITS)
    assert [budget.limit(test.nodeid) for test in lab.tests] == [50.0, 100.0, 1500.0]
    assert [budget.test(test.nodeid).cpu_s for test in lab.tests] == [10.0, 20.0, 300.0]
    assert budget.lab_s == 50 + 100 + 1500 + full_canaries_allowance(50, 100, 1500) + 100
    assert lab_budget(lab_with(0.1, wall=0.5), LIMITS).lab_s == 50 + full_canaries_allowance(50) + 60, (
        "start-up allowance is at least 60 s"
    )
    assert lab_budget(lab, RunLimits(lab_timeout_s=99)).lab_s == 99
    assert budget.test("not/in/the/rubric::test_x").cpu_s == LIMITS.min_test_timeout_s, "the floor"
    costs = [lab_budget(lab_with(0.1, 2.0, None, cpu=(0.3, 1.0, None)), LIMITS).cost(t.nodeid) for t in lab.tests]
    assert costs == [0.3, 2.0, None], "the reference's seconds (wall or CPU, the larger); None: never timed"


def test_submission_budget_and_options_for_another_process():
    rubric = Rubric((lab_with(1.0, wall=2.0), LabRubric("labY", "labY", "Y", error="broken")))
    assert submission_budget_s(rubric, LIMITS) == 50 + full_canaries_allowance(50) + 60
    assert time_limit_args(RunLimits(test_timeout_s=5)) == [
        "--time-factor",
        "10",
        "--min-test-timeout",
        "10",
        "--wall-factor",
        "5",
        "--max-consecutive-timeouts",
        "25",
        "--test-timeout",
        "5",
    ]


def _test(nodeid: str, timeout: bool = False) -> list[dict]:
    call = {"event": "report", "nodeid": nodeid, "when": "call", "outcome": "failed" if timeout else "passed"}
    if timeout:
        call["timeout"] = True
    return [{"event": "start", "nodeid": nodeid}, call, {"event": "finish", "nodeid": nodeid}]


def test_the_timeout_streak_counts_tests_in_a_row_and_ignores_canaries():
    events = [*_test("a", True), *_test(canary_nodeid(1, "a")), *_test("b", True)]
    assert timeout_streak(events) == ["a", "b"], "a canary between two timeouts does not break the streak"
    assert timeout_streak([*events, *_test("c")]) == [], "a test that ends in time breaks it"
    killed = [*events, {"event": "start", "nodeid": "d"}, {"event": KILLED_EVENT, "nodeid": "d", "limit_s": 3}]
    assert timeout_streak(killed) == ["a", "b", "d"], "a test the runner killed counts"


def stepped_lab(steps: dict[int, int], heldout_areas: tuple[str, ...] = ()) -> LabRubric:
    """A lab whose step ``n`` has ``steps[n]`` tests (functions ``test_<n>_<i>``), then one held-out test per area."""
    tests = [
        RubricTest(f"labX/test_lab.py::test_{n}_{i}", f"test_{n}_{i}", 1, False, reference_s=0.01)
        for n, count in steps.items()
        for i in range(count)
    ]
    tests += [
        RubricTest(f"labX/heldout/test_x.py::test_h{i}", f"test_h{i}", 1, False, "heldout", area, reference_s=0.01)
        for i, area in enumerate(heldout_areas)
    ]
    handout = tuple(
        Step(n, f"step {n}", ("x.py",), tuple(f"test_{n}_{i}" for i in range(count))) for n, count in steps.items()
    )
    return LabRubric("labX", "labX", "Demo", tuple(tests), steps=handout)


def test_a_streak_stops_the_part_only_when_it_spans_more_than_one_handout_step():
    """One hanging function times out its own step's tests in a row: lab 1's step 11 runs 57 tests that all
    call its algebraic simplifier, lab 2's step 5 48. With a bare count (25) such a hang stopped the lab there, and
    every step after it scored 0 untried; it must cost only its own tests."""
    lab = stepped_lab({1: 30, 2: 3}, heldout_areas=("folding", "folding", "layout"))
    budget = lab_budget(lab, LIMITS)
    step_1 = [test.nodeid for test in lab.tests[:30]]
    step_2 = [test.nodeid for test in lab.tests[30:33]]
    assert not budget.stops_at(step_1), "30 timeouts of one step: its function hangs, the next step still runs"
    assert budget.stops_at([*step_1, step_2[0]]), "the streak runs on into the next step: more than one hangs"
    assert not budget.stops_at([*step_1[-23:], *step_2[:1]]), "...once it is 25 tests long"
    assert budget.stops_at([*step_1[-24:], *step_2[:1]])
    assert not lab_budget(lab, replace(LIMITS, max_consecutive_timeouts=0)).stops_at([*step_1, *step_2])
    heldout = lab_budget(lab, replace(LIMITS, max_consecutive_timeouts=2), heldout=True)
    folding, layout = [test.nodeid for test in lab.tests[33:35]], lab.tests[35].nodeid
    assert not heldout.stops_at(folding), "held-out tests off every step count by their area"
    assert heldout.stops_at([*folding, layout])


def test_the_supervisor_tells_the_probe_to_stop_only_once_the_streak_leaves_its_step():
    """The same rule where it is applied during a run: the recorder's answer after each test."""
    from grader.tests.execute.test_full_canaries import Supervisor

    lab = stepped_lab({1: 4, 2: 2})
    budget = lab_budget(lab, replace(LIMITS, max_consecutive_timeouts=3))
    supervisor = Supervisor([test.nodeid for test in lab.tests], stops=budget.stops_at)
    answers = []
    for nodeid, canary in supervisor.recorder.order:
        supervisor.send(START, nodeid)
        supervisor.send(REPORT, nodeid, when="call", outcome="failed", timeout=not canary)
        answer = supervisor.send(FINISH, nodeid)
        if not canary:
            answers.append((nodeid.rsplit("::", 1)[1], answer))
        if answer == STOP:
            break
    assert answers == [
        ("test_1_0", GO_ON),
        ("test_1_1", GO_ON),
        ("test_1_2", GO_ON),
        ("test_1_3", GO_ON),
        ("test_2_0", STOP),
    ], "four timeouts in step 1 go on; the first of step 2 stops"
    (stopped,) = [event for event in supervisor.events() if event["event"] == STOPPED_EVENT]
    assert stopped["streak"] == 5 and "5 tests in a row" in stopped["reason"]


def test_the_watch_reports_a_test_past_its_wall_clock_backstop_plus_grace():
    lab = lab_with(0.1)  # CPU limit 10 s, backstop 50 s
    budget = lab_budget(lab, LIMITS)
    nodeid = lab.tests[0].nodeid
    assert overran(None, budget, 1000.0) is None, "no test running"
    assert overran((nodeid, 100.0), budget, 100.0 + 50 + overrun_grace_s(50) - 0.1) is None, "the alarm's grace"
    assert overran((nodeid, 100.0), budget, 100.0 + 50 + overrun_grace_s(50) + 0.1) == nodeid
    canary = canary_nodeid(5, nodeid)
    assert overran((canary, 100.0), budget, 100.0 + 50 + overrun_grace_s(50) + 0.1) == canary, "its copy's limit"


def test_reference_times_are_the_passed_tests_phases_summed():
    events = (
        {"event": "report", "nodeid": "a", "when": "setup", "outcome": "passed", "duration": 0.1, "cpu": 0.05},
        {"event": "report", "nodeid": "a", "when": "call", "outcome": "passed", "duration": 1.2, "cpu": 2.2},
        {"event": "report", "nodeid": "b", "when": "setup", "outcome": "skipped", "duration": 0.0},
        {"event": "report", "nodeid": "canary", "when": "call", "outcome": "failed", "duration": 0.0},
    )
    assert passed_test_times(events, {"a", "b"}) == {"a": 1.3}, "skipped (GPU) tests and canaries have no time"
    assert passed_test_times(events, {"a", "b"}, field="cpu") == {"a": 2.25}, "two threads: more CPU than wall"


def test_a_new_recording_keeps_old_times_of_tests_it_could_not_time(tmp_path):
    old = ReferenceTimes({"a": 1.0, "gpu": 5.0, "gone": 2.0}, 9.0, cpu={"a": 0.9, "gpu": 1.0})
    new = ReferenceTimes({"a": 1.5}, 10.0, {"cpus": 2}, cpu={"a": 1.4})
    both = merged(new, old, {"a", "gpu"})
    assert both.tests == {"a": 1.5, "gpu": 5.0} and both.lab_wall_s == 10.0 and both.cpu == {"a": 1.4, "gpu": 1.0}
    write_reference_times(tmp_path, both)
    assert read_reference_times(tmp_path) == both
    (tmp_path / TIMES_FILE).write_text("{not json")
    assert read_reference_times(tmp_path) is None


def test_held_out_tests_times_stay_in_the_heldout_folder_which_never_ships(tmp_path):
    hidden = "labX/heldout/test_heldout.py::test_other_shapes[7]"
    write_reference_times(tmp_path, ReferenceTimes({"labX/test_lab.py::test_a": 1.0, hidden: 2.0}, 4.0))
    assert hidden not in (tmp_path / TIMES_FILE).read_text()
    assert hidden in (tmp_path / "heldout" / TIMES_FILE).read_text()
    assert read_reference_times(tmp_path).tests == {"labX/test_lab.py::test_a": 1.0, hidden: 2.0}


def test_the_rubric_carries_the_recorded_times():
    times = ReferenceTimes({"labX/test_lab.py::test_1": 0.5}, 3.0, cpu={"labX/test_lab.py::test_1": 0.4})
    lab = with_reference_times(lab_with(None, None), times)
    assert [test.reference_s for test in lab.tests] == [None, 0.5] and lab.reference_wall_s == 3.0
    assert [test.reference_cpu_s for test in lab.tests] == [None, 0.4]
    assert Rubric.from_dict(Rubric((lab,)).to_dict()) == Rubric((lab,))


@pytest.mark.parametrize("lab_folder", ["labA_arith", "labB_text"])
def test_the_demo_course_has_recorded_times(lab_folder):
    from grader.tests.corpus import DEMO_COURSE

    times = read_reference_times(DEMO_COURSE / lab_folder)
    assert times is not None and times.tests and times.lab_wall_s


def test_a_streak_limit_of_0_never_stops_a_lab(demo_setup, tmp_path):
    """``--max-consecutive-timeouts 0`` means never: one killed test used to stop the rest of the lab."""
    from dataclasses import replace

    from grader.runners.local import GradingSetup, grade_submission
    from grader.tests.corpus import expected, materialize

    assert not lab_budget(lab_with(1.0), replace(LIMITS, max_consecutive_timeouts=0)).stops_at(["t"] * 99)
    options = replace(demo_setup.options, limits=replace(demo_setup.options.limits, max_consecutive_timeouts=0))
    setup = GradingSetup(demo_setup.course, demo_setup.labs, demo_setup.rubric, options)
    submission = materialize("swallows_timeout", tmp_path / "swallows_timeout")
    lab = grade_submission(submission, tmp_path / "graded", setup, only_labs=["labA"]).lab("labA")
    graded_as = expected("swallows_timeout")["labs"]["labA"]  # the same rows as with the default streak limit
    assert lab.status == "graded", (lab.status, lab.reason)
    assert lab.score == graded_as["score"] + graded_as["heldout"]


def test_a_test_requesting_shared_fixtures_may_build_them_under_the_limit_of_a_test_never_timed():
    lab = lab_with(0.001, 0.001)
    shared = ("module:compiled_models", "session:lab")
    lab = replace(lab, tests=(replace(lab.tests[0], shared_fixtures=shared), lab.tests[1]))
    budget = lab_budget(lab, LIMITS)
    first, plain = lab.tests[0].nodeid, lab.tests[1].nodeid
    assert budget.test(first).cpu_s == budget.test(plain).cpu_s == LIMITS.min_test_timeout_s  # its own limit...
    assert budget.test(first).shared_setup.cpu_s == LIMITS.unmeasured_test_timeout_s  # ...and the allowance
    assert budget.test(plain).shared_setup is None
    assert budget.test(first).fixture_keys(first) == {"compiled_models@labX/test_lab.py", "lab@"}
    # The supervisor's outside backstop allows the build only to the test that builds (the first to ask)
    assert budget.limit(first, builds_shared_fixtures=True) == budget.test(first).shared_setup.wall_s + budget.limit(
        first
    )
    assert budget.limit(first) == budget.limit(plain) < budget.limit(first, builds_shared_fixtures=True)
    builders = SharedFixtureBuilders(budget)
    for running in [(first, 0.0), (canary_nodeid(1, first), 5.0), (plain, 6.0)]:
        builders.saw(running)
    assert builders == {first}
    assert overran((first, 0.0), budget, 100.0) == first and overran((first, 0.0), budget, 100.0, builders) is None
    assert Rubric.from_dict(Rubric((lab,)).to_dict()) == Rubric((lab,))


def test_the_test_that_builds_shared_fixtures_has_its_own_limit_once_its_call_began():
    """The build's allowance covers the builder's setup only. A builder whose call hangs (the
    ``swallows_timeout`` submission's ``mean``, drawn first in its process) had it for the call too: a
    backstop of 1,500 s in a lab of 115 s, so the whole lab timed out instead of that one test."""
    lab = lab_with(0.001, 0.001)
    lab = replace(lab, tests=tuple(replace(test, shared_fixtures=("session:lab",)) for test in lab.tests))
    budget = lab_budget(lab, LIMITS)
    first, plain = lab.tests[0].nodeid, lab.tests[1].nodeid
    recorder = EventRecorder(io.BytesIO(), seed=0, stream_cap_bytes=1 << 20)
    for event in ({"event": CONFIGURE}, {"event": COLLECTED, "nodeids": [first, plain]}):
        recorder.accept(event)
    starts_with = recorder.order[0][0]
    recorder.accept({"event": START, "nodeid": starts_with})
    running = recorder.now_running()
    builders = SharedFixtureBuilders(budget)
    builders.saw(running)
    assert builders == {original_nodeid(running[0])}, "whichever test (or canary) starts first builds `lab`"
    assert recorder.call_began() is None, "its setup goes on"
    recorder.accept({"event": REPORT, "nodeid": starts_with, "when": "setup", "outcome": "passed"})
    began = recorder.call_began()
    assert began is not None and began[0] == running[0] and began[1] >= running[1]
    own = budget.limit(original_nodeid(running[0]))
    past_own = began[1] + own + overrun_grace_s(own) + 0.1
    assert overran(running, budget, past_own, builders) is None, "without the call's start: the allowance"
    assert overran(running, budget, past_own, builders, ("another test", began[1])) is None, "not its call"
    assert overran(running, budget, past_own, builders, began) == running[0], "its call: its own limit"
    assert overran(running, budget, past_own - 0.2, builders, began) is None


SHARED_FIXTURE_TESTS = '''


@pytest.fixture(scope="module")
def slow_shared_table():
    """Built once per module, in the setup of whichever test asks first: 4 s of CPU."""
    import time
    start = time.process_time()
    while time.process_time() - start < 4.0:
        pass
    return {n: n * n for n in range(10)}


@pytest.mark.points(1)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_squares_from_a_shared_table(lab, slow_shared_table, n):
    assert slow_shared_table[n] == n * n
'''


def test_whichever_test_builds_a_slow_shared_fixture_keeps_its_points(tmp_path):
    """A module-scoped fixture built in the setup of the first test to ask: its recorded time is that of a
    test that found it built (a canary built it when the times were recorded), so its own 3 s limit used to
    time out the build, and every test of the module lost its points."""
    import json
    import shutil
    from dataclasses import replace as replaced

    from grader.course.labs import load_course, make_reference_submission
    from grader.execute.isolation import Unisolated
    from grader.runners.local import GradeOptions, GradingSetup, grade_submission
    from grader.tests.conftest import DEMO_LIMITS
    from grader.tests.corpus import DEMO_COURSE

    course_root = tmp_path / "course"
    shutil.copytree(DEMO_COURSE, course_root, ignore=shutil.ignore_patterns("__pycache__"))
    tests = course_root / "labA_arith" / "test_lab.py"
    tests.write_text(tests.read_text() + SHARED_FIXTURE_TESTS)
    times_file = course_root / "labA_arith" / TIMES_FILE
    times = json.loads(times_file.read_text())
    for n in (2, 3, 4):  # as recorded when the canary built the table: no test paid for it
        for kind in ("tests", "cpu"):
            times[kind][f"labA_arith/test_lab.py::test_squares_from_a_shared_table[{n}]"] = 0.001
    times_file.write_text(json.dumps(times))
    course = load_course(course_root)
    options = GradeOptions(
        gpu="auto", limits=replaced(DEMO_LIMITS, unmeasured_test_timeout_s=60.0), isolation=Unisolated()
    )
    setup = GradingSetup.for_course(course, options, ["labA"])
    rubric_squares = [test for test in setup.rubric.labs[0].tests if test.name == "test_squares_from_a_shared_table"]
    assert [test.shared_fixtures for test in rubric_squares] == [("module:lab", "module:slow_shared_table")] * 3
    reference = make_reference_submission(course, tmp_path / "reference")
    lab = grade_submission(reference, tmp_path / "graded", setup, name="reference").lab("labA")
    squares = [test for test in lab.tests if test.name == "test_squares_from_a_shared_table"]
    assert len(squares) == 3 and all(test.outcome == "passed" for test in squares), [
        (test.nodeid, test.outcome, test.message) for test in squares
    ]
    assert lab.score == lab.max_score


def test_a_control_message_to_a_process_that_never_read_it_raises_nothing():
    """pytest that cannot start exits before reading its control pipe: its exit status says so, and the
    thread that wrote the message prints no BrokenPipeError traceback on the grader's console (the
    buffered write fails only when the pipe is flushed on close)."""
    from grader.execute.supervisor import _send

    read_end, write_end = os.pipe()
    os.close(read_end)
    _send(write_end, b'{"control": 1}')  # raised BrokenPipeError from the close before
    with pytest.raises(OSError):
        os.fstat(write_end)  # and the descriptor is closed all the same
