"""Time budgets (pure functions) and the reference times they come from; the hang fixtures of the corpus
(``hangs_in_one_function``, ``hangs_everywhere``, ``swallows_timeout``, ``slow_but_correct``) show them at work."""

from __future__ import annotations


import pytest

from grader.course.reference_times import (
    TIMES_FILE,
    ReferenceTimes,
    merged,
    read_reference_times,
    write_reference_times,
)
from grader.course.rubric import LabRubric, Rubric, RubricTest, with_reference_times
from grader.evidence.events import KILLED_EVENT, canary_nodeid, timeout_streak
from grader.evidence.runs import passed_test_times
from grader.execute.limits import RunLimits, lab_budget, limit_for_test, submission_budget_s, time_limit_args
from grader.execute.supervisor import overran, overrun_grace_s

LIMITS = RunLimits()  # factor 10, at least 10 s, 300 s unmeasured, 60 s start-up at least, 15 in a row


def lab_with(*reference_s: float | None, wall: float | None = None) -> LabRubric:
    tests = tuple(RubricTest(f"labX/test_lab.py::test_{i}", f"test_{i}", 1, False, reference_s=ref)
                  for i, ref in enumerate(reference_s))
    return LabRubric("labX", "labX", "Demo", tests, reference_wall_s=wall)


def test_a_test_gets_a_multiple_of_the_reference_time_with_a_floor():
    assert limit_for_test(0.05, LIMITS)[0] == 10.0, "fast tests get the floor"
    limit, basis = limit_for_test(3.7, LIMITS)
    assert limit == 37.0 and basis == "10 x the reference solution's 3.7 s"
    assert limit_for_test(None, LIMITS) == (300.0, "the reference solution was never timed on this test")
    assert limit_for_test(3.7, RunLimits(test_timeout_s=30)) == (30.0, "set with --test-timeout")
    assert limit_for_test(0.0001, LIMITS)[1] == "the minimum per-test limit; the reference solution takes under 1 ms"


def test_the_lab_budget_is_the_sum_of_its_test_limits_plus_start_up():
    lab = lab_with(0.1, 2.0, None, wall=12.1)  # start-up = 12.1 - 2.1 = 10 s, x 10 = 100 s
    budget = lab_budget(lab, LIMITS)
    assert [budget.limit(test.nodeid) for test in lab.tests] == [10.0, 20.0, 300.0]
    assert budget.lab_s == 10 + 20 + 300 + 100
    assert lab_budget(lab_with(0.1, wall=0.5), LIMITS).lab_s == 10 + 60, "start-up allowance is at least 60 s"
    assert lab_budget(lab, RunLimits(lab_timeout_s=99)).lab_s == 99
    assert budget.limit("labX/test_lab.py::test_c4n4ry[0]") == LIMITS.min_test_timeout_s, "canaries: the floor"


def test_submission_budget_and_options_for_another_process():
    rubric = Rubric((lab_with(1.0, wall=2.0), LabRubric("labY", "labY", "Y", error="broken")))
    assert submission_budget_s(rubric, LIMITS) == 10 + 60
    assert time_limit_args(RunLimits(test_timeout_s=5)) == [
        "--time-factor", "10", "--min-test-timeout", "10", "--max-consecutive-timeouts", "15", "--test-timeout", "5"]


def _test(nodeid: str, timeout: bool = False) -> list[dict]:
    call = {"event": "report", "nodeid": nodeid, "when": "call", "outcome": "failed" if timeout else "passed"}
    if timeout:
        call["timeout"] = True
    return [{"event": "start", "nodeid": nodeid}, call, {"event": "finish", "nodeid": nodeid}]


def test_the_timeout_streak_counts_tests_in_a_row_and_ignores_canaries():
    events = [*_test("a", True), *_test(canary_nodeid(1, "a")), *_test("b", True)]
    assert timeout_streak(events) == 2, "a canary between two timeouts does not break the streak"
    assert timeout_streak([*events, *_test("c")]) == 0, "a test that ends in time breaks it"
    killed = [*events, {"event": "start", "nodeid": "d"}, {"event": KILLED_EVENT, "nodeid": "d", "limit_s": 3}]
    assert timeout_streak(killed) == 3, "a test the runner killed counts"


def test_the_watch_reports_a_test_past_its_limit_plus_grace():
    lab = lab_with(0.1)  # limit 10 s
    budget = lab_budget(lab, LIMITS)
    nodeid = lab.tests[0].nodeid
    assert overran(None, budget, 1000.0) is None, "no test running"
    assert overran((nodeid, 100.0), budget, 100.0 + 10 + overrun_grace_s(10) - 0.1) is None, "the alarm's grace"
    assert overran((nodeid, 100.0), budget, 100.0 + 10 + overrun_grace_s(10) + 0.1) == nodeid
    canary = canary_nodeid(5, nodeid)
    assert overran((canary, 100.0), budget, 100.0 + 10 + overrun_grace_s(10) + 0.1) == canary, "its copy's limit"


def test_reference_times_are_the_passed_tests_phases_summed():
    events = (
        {"event": "report", "nodeid": "a", "when": "setup", "outcome": "passed", "duration": 0.1},
        {"event": "report", "nodeid": "a", "when": "call", "outcome": "passed", "duration": 1.2},
        {"event": "report", "nodeid": "b", "when": "setup", "outcome": "skipped", "duration": 0.0},
        {"event": "report", "nodeid": "canary", "when": "call", "outcome": "failed", "duration": 0.0},
    )
    assert passed_test_times(events, {"a", "b"}) == {"a": 1.3}, "skipped (GPU) tests and canaries have no time"


def test_a_new_recording_keeps_old_times_of_tests_it_could_not_time(tmp_path):
    old = ReferenceTimes({"a": 1.0, "gpu": 5.0, "gone": 2.0}, 9.0)
    new = ReferenceTimes({"a": 1.5}, 10.0, {"cpus": 2})
    both = merged(new, old, {"a", "gpu"})
    assert both.tests == {"a": 1.5, "gpu": 5.0} and both.lab_wall_s == 10.0
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
    lab = with_reference_times(lab_with(None, None), ReferenceTimes({"labX/test_lab.py::test_1": 0.5}, 3.0))
    assert [test.reference_s for test in lab.tests] == [None, 0.5] and lab.reference_wall_s == 3.0
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

    assert not lab_budget(lab_with(1.0), replace(LIMITS, max_consecutive_timeouts=0)).stops_at(99)
    options = replace(demo_setup.options, limits=replace(demo_setup.options.limits, max_consecutive_timeouts=0))
    setup = GradingSetup(demo_setup.course, demo_setup.labs, demo_setup.rubric, options)
    submission = materialize("swallows_timeout", tmp_path / "swallows_timeout")
    lab = grade_submission(submission, tmp_path / "graded", setup, only_labs=["labA"]).lab("labA")
    graded_as = expected("swallows_timeout")["labs"]["labA"]  # the same rows as with the default streak limit
    assert lab.status == "graded", (lab.status, lab.reason)
    assert lab.score == graded_as["score"] + graded_as["heldout"]

