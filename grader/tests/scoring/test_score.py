"""Scoring is a pure function: these tests build runs by hand (no subprocess) and check each rule."""

from __future__ import annotations

import json

import pytest

from grader.course.rubric import LabRubric, Rubric, RubricTest, TalkingPointSpec, describe_rubric
from grader.evidence.events import canary_nodeid, read_events, run_order
from grader.evidence.runs import LabRun, LabRuns
from grader.scoring.results import EVIDENCE_PASSED, EVIDENCE_PENDING, NOT_YET, SubmissionResult
from grader.scoring.score import describe_exit, score_lab, score_submission

RUBRIC = LabRubric(
    lab="labX",
    package="labX_demo",
    title="Demo",
    tests=(
        RubricTest("labX_demo/test_lab.py::test_a", "test_a", 2, False),
        RubricTest("labX_demo/test_lab.py::test_b[1]", "test_b", 1, False),
        RubricTest("labX_demo/test_lab.py::test_b[2]", "test_b", 1, False),
        RubricTest("labX_demo/test_lab.py::test_gpu", "test_gpu", 3, True),
    ),
    talking_points=(
        TalkingPointSpec("a", "talking_point", "A?", ("test_a",)),
        TalkingPointSpec("b", "interview", "B?", ("test_b",)),
        TalkingPointSpec("g", "interview", "G?", ("test_a", "test_gpu")),
        TalkingPointSpec("stale", "interview", "S?", ("test_gone",)),
    ),
)


def passed(nodeid: str) -> list[dict]:
    return [
        {"event": "start", "nodeid": nodeid},
        *({"event": "report", "nodeid": nodeid, "when": w, "outcome": "passed"} for w in ("setup", "call", "teardown")),
        {"event": "finish", "nodeid": nodeid},
    ]


def failed(nodeid: str, message: str = "AssertionError", when: str = "call") -> list[dict]:
    phases = [
        {
            "event": "report",
            "nodeid": nodeid,
            "when": "setup",
            "outcome": "passed" if when != "setup" else "failed",
            "message": message if when == "setup" else "",
        }
    ]
    if when == "call":
        phases.append({"event": "report", "nodeid": nodeid, "when": "call", "outcome": "failed", "message": message})
    return [
        {"event": "start", "nodeid": nodeid},
        *phases,
        {"event": "report", "nodeid": nodeid, "when": "teardown", "outcome": "passed"},
        {"event": "finish", "nodeid": nodeid},
    ]


def skipped(nodeid: str, reason: str) -> list[dict]:
    return [
        {"event": "start", "nodeid": nodeid},
        {"event": "report", "nodeid": nodeid, "when": "setup", "outcome": "skipped", "message": reason},
        {"event": "report", "nodeid": nodeid, "when": "teardown", "outcome": "passed"},
        {"event": "finish", "nodeid": nodeid},
    ]


def node(name: str) -> str:
    return f"labX_demo/test_lab.py::{name}"


def run_of(
    *events: list[dict], finished: bool = True, report_passed: list[str] | None = None, exit_code: int = 1, **extra
) -> LabRun:
    log = [{"event": "configure"}, {"event": "collected", "nodeids": []}]
    for chunk in events:
        log.extend(chunk)
    if finished:
        log.append({"event": "session_finish", "exitstatus": exit_code})
    report = None
    if report_passed is not None:
        report = {"tests": [{"nodeid": n, "outcome": "passed"} for n in report_passed]}
    return LabRun(
        lab="labX",
        exit_code=exit_code,
        timed_out=extra.get("timed_out", False),
        output_flooded=False,
        wall_s=1.0,
        events=tuple(log),
        report=report,
        output_tail=extra.get("tail", ""),
        heldout=extra.get("heldout", False),
    )


ALL_CPU = [node("test_a"), node("test_b[1]"), node("test_b[2]")]


def outcomes(lab) -> dict[str, str]:
    return {test.nodeid.split("::")[1]: test.outcome for test in lab.tests}


def test_a_finished_run_scores_passes_and_lists_gpu_points_as_pending():
    run = run_of(*(passed(n) for n in ALL_CPU), skipped(node("test_gpu"), "needs a CUDA GPU"), report_passed=ALL_CPU)
    lab = score_lab(RUBRIC, run, gpu="auto")
    assert (lab.score, lab.max_score, lab.pending, lab.status) == (4, 7, 3, "graded")
    assert outcomes(lab)["test_gpu"] == "pending"


def test_with_gpu_on_a_skipped_gpu_test_fails():
    run = run_of(*(passed(n) for n in ALL_CPU), skipped(node("test_gpu"), "no CUDA"), report_passed=ALL_CPU)
    lab = score_lab(RUBRIC, run, gpu="on")
    assert (lab.score, lab.pending) == (4, 0)
    assert outcomes(lab)["test_gpu"] == "failed"


def test_a_cpu_test_skipped_by_student_code_is_worth_nothing():
    run = run_of(skipped(node("test_a"), "student called pytest.skip"), report_passed=[])
    assert outcomes(score_lab(RUBRIC, run))["test_a"] == "skipped"


def test_a_pass_the_final_report_does_not_confirm_is_not_a_pass():
    run = run_of(*(passed(n) for n in ALL_CPU), report_passed=[node("test_a")])
    lab = score_lab(RUBRIC, run)
    assert lab.score == 2 and outcomes(lab)["test_b[1]"] == "failed"


def test_a_crash_keeps_earlier_passes_and_never_passes_the_rest():
    run = run_of(
        passed(node("test_a")),
        [{"event": "start", "nodeid": node("test_b[1]")}],
        finished=False,
        report_passed=None,
        exit_code=-11,
    )
    lab = score_lab(RUBRIC, run)
    assert lab.status == "crashed" and "SIGSEGV" in lab.reason
    assert outcomes(lab) == {"test_a": "passed", "test_b[1]": "crashed", "test_b[2]": "not-run", "test_gpu": "not-run"}
    assert (lab.score, lab.max_score, lab.pending) == (2, 7, 0)


def test_a_lab_timeout_marks_the_running_test_as_timeout():
    run = run_of(
        passed(node("test_a")),
        [{"event": "start", "nodeid": node("test_b[1]")}],
        finished=False,
        timed_out=True,
        exit_code=-9,
    )
    lab = score_lab(RUBRIC, run)
    assert lab.status == "timeout" and outcomes(lab)["test_b[1]"] == "timeout" and lab.score == 2


def test_a_per_test_timeout_is_reported_as_timeout():
    run = run_of(failed(node("test_a"), "Failed: Timeout (>2.0s) from pytest-timeout."), report_passed=[])
    assert outcomes(score_lab(RUBRIC, run))["test_a"] == "timeout"


def test_the_graders_time_limit_is_reported_as_timeout():
    timed_out = failed(node("test_a"), "grader.execute.probe.TestTimeLimit: this test ran over its time limit of 3 s")
    timed_out[2]["timeout"] = True
    run = run_of(timed_out, *(passed(n) for n in ALL_CPU[1:]), report_passed=ALL_CPU[1:])
    lab = score_lab(RUBRIC, run)
    assert lab.status == "graded" and outcomes(lab)["test_a"] == "timeout" and lab.score == 2


def test_a_killed_test_is_a_timeout_and_the_resumed_process_is_scored_with_its_own_report():
    """test_b[1] swallowed the alarm: the runner killed pytest (no report) and resumed it (report.1.json)."""
    first = [
        *passed(node("test_a")),
        {"event": "start", "nodeid": node("test_b[1]")},
        {"event": "killed", "nodeid": node("test_b[1]"), "limit_s": 3.0},
    ]
    resumed = [
        {"event": "configure"},
        {"event": "collected", "nodeids": []},
        *passed(node("test_b[2]")),
        *skipped(node("test_gpu"), "needs a CUDA GPU"),
    ]
    run = run_of(first, resumed, report_passed=None)
    run = LabRun(**{**vars(run), "resumed_reports": ({"tests": [{"nodeid": node("test_b[2]"), "outcome": "passed"}]},)})
    lab = score_lab(RUBRIC, run)
    assert lab.status == "graded", lab.reason
    assert outcomes(lab) == {"test_a": "passed", "test_b[1]": "timeout", "test_b[2]": "passed", "test_gpu": "pending"}
    assert "killed it and went on" in next(t.message for t in lab.tests if t.outcome == "timeout")
    forged = LabRun(**{**vars(run), "resumed_reports": ({"tests": []},)})
    assert outcomes(score_lab(RUBRIC, forged))["test_b[2]"] == "failed", "each process's own report must confirm"


def test_a_lab_killed_on_its_last_test_is_graded_not_crashed():
    run = run_of(
        *(passed(n) for n in ALL_CPU),
        [
            {"event": "start", "nodeid": node("test_gpu")},
            {"event": "killed", "nodeid": node("test_gpu"), "limit_s": 9.0},
        ],
        finished=False,
        report_passed=None,
        exit_code=-9,
    )
    lab = score_lab(RUBRIC, run)
    assert (lab.status, lab.score, outcomes(lab)["test_gpu"]) == ("graded", 4, "timeout")


def test_a_lab_stopped_by_the_streak_rule_says_so_and_lists_the_rest_as_not_run():
    timeouts = [failed(node(name), "TestTimeLimit") for name in ("test_a", "test_b[1]")]
    for events in timeouts:
        events[2]["timeout"] = True
    run = run_of(*timeouts, [{"event": "stopped", "streak": 2}], report_passed=[])
    lab = score_lab(RUBRIC, run)
    assert lab.status == "stopped" and lab.score == 0
    assert "2 tests in a row ran out of time" in lab.reason and "remaining 2 tests were not run" in lab.reason
    assert outcomes(lab) == {"test_a": "timeout", "test_b[1]": "timeout", "test_b[2]": "not-run", "test_gpu": "not-run"}
    assert "stopped after too many timeouts" in lab.tests[-1].message


def test_setup_failures_are_errors():
    run = run_of(failed(node("test_a"), "ImportError", when="setup"), report_passed=[])
    assert outcomes(score_lab(RUBRIC, run))["test_a"] == "error"


def test_a_passing_canary_voids_the_run_even_if_only_the_report_says_so():
    canary = canary_nodeid(1, node("test_a"))
    run = run_of(*(passed(n) for n in ALL_CPU), report_passed=[*ALL_CPU, canary])
    lab = score_lab(RUBRIC, run)
    assert (lab.score, lab.status) == (0, "void")
    result = score_submission(Rubric((RUBRIC,)), {"labX": run}, submission="s")
    assert any("canary" in flag for flag in result.flags)


def test_a_passing_canary_in_the_event_log_voids_the_run():
    run = run_of(*(passed(n) for n in ALL_CPU), passed(canary_nodeid(3, node("test_a"))), report_passed=ALL_CPU)
    assert score_lab(RUBRIC, run).status == "void"


def test_events_the_supervisor_refused_void_the_run():
    refused = [
        {"event": "rejected", "reason": "a second call report for labX_demo/test_lab.py::test_a", "kind": "report"}
    ]
    run = run_of(*(passed(n) for n in ALL_CPU), refused, report_passed=ALL_CPU)
    lab = score_lab(RUBRIC, run)
    assert (lab.status, lab.score) == ("void", 0) and "results channel" in lab.reason and "second call" in lab.reason


def test_a_collection_error_scores_zero_of_the_full_maximum():
    log = (
        {"event": "configure"},
        {"event": "collect_error", "nodeid": "labX_demo/test_lab.py", "message": "SyntaxError: x"},
        {"event": "collected", "nodeids": []},
        {"event": "session_finish", "exitstatus": 2},
    )
    run = LabRun("labX", 2, False, False, 0.5, log, None)
    lab = score_lab(RUBRIC, run)
    assert (lab.score, lab.max_score, lab.status) == (0, 7, "collection-error") and "SyntaxError" in lab.reason


def test_pytest_dying_before_collection_is_a_collection_error_with_the_output():
    run = LabRun("labX", 3, False, False, 0.5, ({"event": "configure"},), None, output_tail="SystemExit: 3")
    lab = score_lab(RUBRIC, run)
    assert lab.status == "collection-error" and "SystemExit: 3" in lab.reason


def test_pytest_that_never_loaded_the_grader_plugin_is_a_grader_error_not_a_collection_error():
    # e.g. the grading Python lacks pytest-json-report: pytest stops at its command line, before any
    # test module (the student's code) is imported, so the probe never logged "configure".
    run = LabRun(
        "labX",
        4,
        False,
        False,
        0.5,
        (),
        None,
        output_tail="ERROR: usage: pytest [options]\npytest: error: unrecognized arguments: --json-report",
    )
    lab = score_lab(RUBRIC, run)
    assert (lab.status, lab.score, lab.max_score) == ("grader-error", 0, 7)
    assert "not the submission's" in lab.reason and "--json-report" in lab.reason
    assert score_submission(Rubric((RUBRIC,)), {"labX": run}, submission="s").grader_faults == (lab,)


def test_the_rubric_line_counts_tests_and_points_apart():
    assert (
        describe_rubric(RUBRIC)
        == "labX: 4 tests worth 7 points, of which 1 GPU test worth 3 points (pending without CUDA)"
    )


def test_an_unavailable_rubric_and_a_missing_run_each_give_a_reason():
    broken = LabRubric("labY", "labY_demo", "Broken", error="tests do not collect")
    result = score_submission(Rubric((RUBRIC, broken)), {}, submission="s", not_run_reason="sandbox failed")
    assert [(lab.status, lab.score, lab.max_score) for lab in result.labs] == [("not-run", 0, 7), ("unavailable", 0, 0)]
    assert result.lab("labX").reason == "sandbox failed" and "do not collect" in result.lab("labY").reason


def test_talking_points_need_every_case_of_every_evidence_test():
    run = run_of(
        passed(node("test_a")),
        passed(node("test_b[1]")),
        failed(node("test_b[2]")),
        skipped(node("test_gpu"), "no CUDA"),
        report_passed=[node("test_a"), node("test_b[1]")],
    )
    points = {p.id: p.status for p in score_lab(RUBRIC, run).talking_points}
    assert points == {"a": EVIDENCE_PASSED, "b": NOT_YET, "g": EVIDENCE_PENDING, "stale": NOT_YET}


def test_results_round_trip_through_json():
    run = run_of(*(passed(n) for n in ALL_CPU), report_passed=ALL_CPU)
    result = score_submission(Rubric((RUBRIC,)), {"labX": run}, submission="s", flags=("f",), notes=("n",))
    assert SubmissionResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert Rubric.from_dict(json.loads(json.dumps(Rubric((RUBRIC,)).to_dict()))) == Rubric((RUBRIC,))


def test_a_torn_last_event_line_is_skipped(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "start", "nodeid": "a"}\n{"event": "rep')
    assert read_events(path) == ({"event": "start", "nodeid": "a"},)


@pytest.mark.parametrize("code, words", [(-11, "SIGSEGV"), (-9, "SIGKILL"), (0, "code 0"), (None, "unknown")])
def test_exits_are_described_in_words(code, words):
    assert words in describe_exit(code)


def test_every_real_test_runs_beside_its_canary_twin_in_an_order_only_the_seed_knows():
    real = ["t::a", "t::b", "t::c", "t::d"]
    order = run_order(real, seed=7)
    assert [nodeid for nodeid, canary in order if not canary] == real
    assert [nodeid for nodeid, _ in order] == [n for n in real for _ in (0, 1)], "twins side by side"
    assert all(order[i][1] != order[i + 1][1] for i in range(0, len(order), 2)), "one canary per pair"
    assert run_order(real, 7) == run_order(real, 7), "the recorder computes it again from the seed"
    firsts = {tuple(canary for _, canary in run_order(real, seed)[::2]) for seed in range(20)}
    assert len(firsts) > 1, "the seed decides which twin is the canary"


def test_heldout_tests_are_scored_alike_and_reported_apart():
    heldout = RubricTest("labX_demo/heldout/test_heldout.py::test_more", "test_a", 4, False, "hidden", "more cases")
    rubric = LabRubric(
        "labX", "labX_demo", "Demo", tests=(*RUBRIC.tests, heldout), talking_points=RUBRIC.talking_points
    )
    visible = run_of(
        *(passed(n) for n in ALL_CPU), skipped(node("test_gpu"), "needs a CUDA GPU"), report_passed=ALL_CPU
    )
    run = LabRuns(visible, run_of(failed(heldout.nodeid), report_passed=[], heldout=True))
    lab = score_lab(rubric, run)
    assert (lab.score, lab.max_score) == (4, 11)
    assert (lab.visible.score, lab.visible.max_score, lab.visible.pending) == (4, 7, 3)
    assert (lab.heldout.score, lab.heldout.max_score) == (0, 4)
    (result,) = [test for test in lab.tests if test.heldout]
    assert result.visibility == "hidden" and result.area == "more cases" and result.outcome == "failed"
    # a held-out test named like an evidence test never counts for the talking point
    assert {p.id: p.status for p in lab.talking_points}["a"] == EVIDENCE_PASSED
    summary = score_submission(Rubric((rubric,)), {"labX": run}, submission="s")
    assert summary.total["heldout"] == {"score": 0, "max_score": 4, "pending": 0}
    assert SubmissionResult.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary


def _heldout_rubric() -> LabRubric:
    heldout = RubricTest(
        "labX_demo/heldout/test_heldout.py::test_secret_case", "test_secret_case", 4, False, "hidden", "more cases"
    )
    return LabRubric("labX", "labX_demo", "Demo", tests=(*RUBRIC.tests, heldout))


def test_a_heldout_part_that_crashed_is_reported_in_words_that_name_no_heldout_case():
    rubric = _heldout_rubric()
    visible = run_of(*(passed(n) for n in ALL_CPU), report_passed=ALL_CPU)
    crashed = run_of(
        [{"event": "start", "nodeid": rubric.tests[-1].nodeid}],
        finished=False,
        exit_code=-11,
        tail="Traceback: heldout/test_heldout.py line 12: SECRET_EXPECTED = 42",
        heldout=True,
    )
    lab = score_lab(rubric, LabRuns(visible, crashed))
    assert lab.status == "crashed" and lab.visible.score == 4 and lab.heldout.score == 0
    assert "held-out" in lab.reason and "SECRET" not in lab.reason and "test_heldout" not in lab.reason


def test_heldout_tests_of_a_lab_whose_heldout_part_never_ran_are_not_run():
    lab = score_lab(_heldout_rubric(), LabRuns(run_of(*(passed(n) for n in ALL_CPU), report_passed=ALL_CPU), None))
    assert lab.tests[-1].outcome == "not-run" and lab.status == "not-run"


def test_an_extension_steps_points_are_scored_alike_and_kept_apart_from_the_score():
    extension = RubricTest("labX_demo/test_lab.py::test_more", "test_more", 5, False, extension=True)
    rubric = LabRubric("labX", "labX_demo", "Demo", tests=(*RUBRIC.tests, extension))
    assert (rubric.max_score, rubric.extension_points) == (RUBRIC.max_score, 5)
    assert describe_rubric(rubric).endswith("; an optional extension of 1 test worth 5 points, apart")
    run = run_of(
        *(passed(n) for n in ALL_CPU),
        skipped(node("test_gpu"), "needs a CUDA GPU"),
        passed(extension.nodeid),
        report_passed=[*ALL_CPU, extension.nodeid],
    )
    lab = score_lab(rubric, run)
    assert (lab.score, lab.max_score, lab.pending) == (4, 7, 3), "the lab's own score, as without the extension"
    assert (lab.extension.score, lab.extension.max_score) == (5, 5) and lab.visible.max_score == 7
    result = score_submission(Rubric((rubric,)), {"labX": run}, submission="s")
    assert result.total["extension"] == {"score": 5, "max_score": 5, "pending": 0} and result.total["score"] == 4
    assert SubmissionResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    from grader.scoring.feedback import summary_line, to_markdown

    assert "labX 4/7 graded · extension 5/5" in summary_line(result)
    assert "optional extension step: 5/5 (apart from the score)" in to_markdown(result)
