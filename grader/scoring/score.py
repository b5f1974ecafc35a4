"""Scoring: a pure function from (rubric, runs) to a result, and ``rescore`` of a graded folder.

``score_submission(rubric, runs, ...)`` reads no file and starts no process, so a regrade is a
recompute over the artifacts a run left (``python -m grader score OUT``), and 1,000 students score in
well under a second.

The rules, test by test (``rubric`` lists every test the pristine course has):

- A test earns its points only if the supervisor's record of the probe's events shows every phase
  passed **and**, when the pytest process that ran it wrote its final pytest-json-report, the report
  agrees (the report, written inside the graded process, can take a pass away, never give one). A test that never
  reported (the process died first) is ``not-run``; the one running when the process died is
  ``crashed``: neither is ever passed.
- A test that ran past its time limit is ``timeout``, whether the grader's alarm stopped it in-process
  or the runner had to kill its process (pytest then resumed with the next test).
- A GPU test that was skipped is ``pending`` (its points listed separately) unless ``gpu="on"``, where
  a GPU was promised and a skip counts as a failure. Any other skip is worth 0.
- Points and the maximum come from the rubric, never from the report.
- Held-out tests (visibility ``hidden`` / ``after_due_date``) are scored by the same rules; results
  carry their visibility, and every report shows visible and held-out points separately.

Lab by lab: a pytest that never started the grader's probe plugin (no ``configure`` event: the plugin
or pytest-json-report is missing, the event log cannot be written) is a ``grader-error``, never the
student's: nothing of the student's runs before that point. A failed collection scores 0 of the full
maximum (reason: the collection error); a crash or a timeout keeps the points of tests that finished
before it; a lab stopped by the streak rule (too many timeouts in a row, :mod:`grader.execute.limits`) is
``stopped`` and keeps the points earned before. A run is **void** (0 points, flagged) when a canary
passed or the supervisor refused events from its results channel: the student's code altered pytest's
results, or the grader's probe, in-process (:mod:`grader.evidence.events`).

A lab runs in two parts, its visible tests and then its held-out tests (each its own process); each
part's tests are scored from that part's run, and the lab's status is the visible part's, or else the
held-out part's. A held-out part's reason is in the grader's own words, naming no held-out case, file
or message (the lab's reason is shown to the student); held-out cases keep their messages here, in
instructor data, and the renderers leave them out (:mod:`grader.scoring.feedback`).
"""

from __future__ import annotations

import signal
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grader.course.rubric import LabRubric, Rubric, RubricTest
from grader.evidence.events import (
    INTROSPECTION_EVENT,
    KILLED_EVENT,
    OVER_LIMIT_EVENT,
    REJECTED_EVENT,
    STOPPED_EVENT,
    is_canary,
    original_nodeid,
    stop_reason,
)
from grader.evidence.layout import RUBRIC_FILE, SUBMISSION_FILE, read_json
from grader.evidence.runs import LabRun, LabRuns, load_lab_runs
from grader.evidence.text import truncate_text
from grader.scoring.results import (
    EVIDENCE_PASSED,
    EVIDENCE_PENDING,
    GRADER_ERROR,
    NOT_YET,
    PASSED,
    PENDING,
    UNAVAILABLE,
    LabResult,
    SubmissionResult,
    TalkingPointResult,
    TestResult,
)

#: Longest failure message kept per test in a result.
MESSAGE_CHARS = 600
#: The instructor's file (in the student's graded folder) holding a grader-error's traceback.
GRADER_ERROR_FILE = "grader-error.txt"
#: What an instructor does about a grader-error (said wherever one is reported).
GRADER_ERROR_ADVICE = (
    "this is the grader's failure, not the submission's: run the grader with the course "
    "environment's interpreter (.nox/course-env/bin/python -m grader, or a nox session), "
    "check that --out is writable, then grade this submission again"
)


@dataclass
class Observed:
    """What the event log says about one test case.

    ``process``: which of the lab's pytest processes ran it (0: the first; more after a resume);
    ``timed_out``: a phase hit the grader's time limit; ``killed_after_s``: the runner killed it at this limit;
    ``over_limit``: the resource cap it went over.
    """

    started: bool = False
    finished: bool = False
    phases: dict[str, tuple[str, str]] = field(default_factory=dict)  # when -> (outcome, message)
    process: int = 0
    timed_out: bool = False
    killed_after_s: float | None = None
    over_limit: str = ""


def observe(events: tuple[dict[str, Any], ...]) -> dict[str, Observed]:
    """Fold the event log into one :class:`Observed` per node id."""
    seen: dict[str, Observed] = {}
    process = -1
    for event in events:
        kind = event.get("event")
        if kind == "configure":
            process += 1
        nodeid = event.get("nodeid")
        if not isinstance(nodeid, str):
            continue
        entry = seen.setdefault(nodeid, Observed())
        if kind == "start":
            entry.started = True
            entry.process = max(process, 0)
        elif kind == "finish":
            entry.finished = True
        elif kind == "report":
            entry.started = True
            entry.phases[str(event.get("when"))] = (str(event.get("outcome")), str(event.get("message") or ""))
            entry.timed_out = entry.timed_out or bool(event.get("timeout"))
        elif kind == KILLED_EVENT:
            entry.killed_after_s = float(event.get("limit_s") or 0.0)
        elif kind == OVER_LIMIT_EVENT:
            entry.over_limit = str(event.get("reason") or "a resource cap")
    return seen


def with_full_canaries_that_died(seen: dict[str, Observed], events: tuple[dict[str, Any], ...]) -> dict[str, Observed]:
    """``seen``, where a full canary that the process died in (it ran its twin's body, which ended the
    process) stands for its twin that never started: that test crashed, it was not left unrun."""
    died = {}
    for event in events:
        if event.get("event") == "start" and event.get("full_canary"):
            canary = seen.get(str(event.get("nodeid")))
            ended = canary is None or canary.finished or "teardown" in canary.phases
            if not ended and canary.killed_after_s is None and not canary.over_limit:  # those are run again
                twin = original_nodeid(str(event.get("nodeid")))
                if twin not in seen or not seen[twin].started:
                    died[twin] = canary
    return {**seen, **died}


def _event_kinds(events: tuple[dict[str, Any], ...]) -> set[str]:
    return {str(event.get("event")) for event in events}


def _report_outcomes(report: dict[str, Any] | None) -> dict[str, str] | None:
    if report is None:
        return None
    return {test.get("nodeid"): test.get("outcome") for test in report.get("tests", []) if isinstance(test, dict)}


def describe_exit(exit_code: int | None) -> str:
    """Say how a process ended, in words (``-11`` -> ``killed by SIGSEGV (segmentation fault)``)."""
    if exit_code is None:
        return "ended in an unknown way"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        extra = " (segmentation fault)" if name == "SIGSEGV" else ""
        return f"was killed by {name}{extra}"
    return f"exited with code {exit_code}"


def canary_passed(run: LabRun, seen: dict[str, Observed]) -> bool:
    """True when any canary case was reported passed, by the event log (``seen``) or by a final report."""
    for nodeid, entry in seen.items():
        if is_canary(nodeid) and entry.phases.get("call", ("", ""))[0] == "passed":
            return True
    return any(
        is_canary(str(nodeid)) and outcome == "passed"
        for report in run.reports
        for nodeid, outcome in (_report_outcomes(report) or {}).items()
    )


def rejections(run: LabRun) -> list[str]:
    """Why the supervisor refused events of this run's results channel (empty for an honest run)."""
    return [str(event.get("reason", "")) for event in run.events if event.get("event") == REJECTED_EVENT]


def _last_process_ended_normally(events: tuple[dict[str, Any], ...]) -> bool:
    """True when the last pytest process finished its session, or was killed for an overrunning test
    or over a resource cap, with no test left to resume (the runner's ``killed`` or ``over_limit`` event
    is then the log's last word)."""
    for event in reversed(events):
        kind = event.get("event")
        if kind in ("session_finish", KILLED_EVENT) or (kind == OVER_LIMIT_EVENT and event.get("nodeid")):
            return True
        if kind == "configure":
            return False
    return False


def lab_status(run: LabRun, seen: dict[str, Observed]) -> tuple[str, str]:
    """The lab's status and the reason, from how the process ended (``seen``: :func:`observe` of its events)."""
    kinds = _event_kinds(run.events)
    collect_errors = [e for e in run.events if e.get("event") == "collect_error"]
    if canary_passed(run, seen):
        return "void", (
            "a canary (a copy of a test whose body always fails) was reported passed: the "
            "submission's code altered pytest's results in-process; this run is void"
        )
    refused = rejections(run)
    if refused:
        return "void", (
            "the graded process sent events the run did not produce (the submission's code wrote "
            f"to the grader's results channel); this run is void. First: {'; '.join(refused[:3])}"
        )
    if "configure" not in kinds and not run.timed_out:
        # pytest_configure runs before any test module is imported: no student code has run yet.
        tail = run.output_tail.strip()[-MESSAGE_CHARS:]
        return GRADER_ERROR, (
            f"pytest could not start with the grader's plugins (it {describe_exit(run.exit_code)}); "
            f"{GRADER_ERROR_ADVICE}. Output: {tail}"
        )
    if collect_errors:
        detail = "; ".join(f"{e.get('nodeid') or 'session'}: {e.get('message', '')}" for e in collect_errors)
        return "collection-error", "the tests could not be collected: " + truncate_text(detail, MESSAGE_CHARS)
    if run.timed_out:
        limit = f" ({run.lab_timeout_s:g} s)" if run.lab_timeout_s else ""
        return "timeout", f"the lab's tests ran over the per-lab time limit{limit} and were stopped"
    if run.output_flooded:
        return "crashed", "the tests printed far too much output and were stopped"
    outside = [str(e.get("reason")) for e in run.events if e.get("event") == OVER_LIMIT_EVENT and not e.get("nodeid")]
    if outside:
        return "crashed", (
            f"the test process went over a resource cap outside any test ({outside[0]}) and was "
            "stopped (code run at import or in a fixture?)"
        )
    if "collected" not in kinds:
        tail = run.output_tail.strip()[-MESSAGE_CHARS:]
        return "collection-error", f"pytest stopped before running any test (it {describe_exit(run.exit_code)}): {tail}"
    if _stop_streak(run):
        return "stopped", stop_reason(_stop_streak(run))  # score_lab adds how many tests were not run
    if not _last_process_ended_normally(run.events):
        return "crashed", (
            f"the test process {describe_exit(run.exit_code)} before pytest finished "
            "(os._exit, sys.exit, a crash in native code?)"
        )
    return "graded", ""


def full_canary_twins(events: tuple[dict[str, Any], ...]) -> frozenset[str]:
    """The tests a full canary copied in this log: pytest-json-report may hold that canary's reports under
    the test's own node id (a full canary whose body failed never learns what it was)."""
    return frozenset(
        original_nodeid(str(event.get("nodeid")))
        for event in events
        if event.get("event") == "start" and event.get("full_canary")
    )


#: A voided test's message: tampering in either part of a lab voids all of it, every test at 0 points.
VOIDED = "the run was voided (see the lab's reason)"


def score_test(
    test: RubricTest,
    seen: Observed | None,
    reports: tuple[dict[str, str] | None, ...],
    status: str,
    gpu: str,
    unconfirmable: frozenset[str] = frozenset(),
) -> TestResult:
    """One rubric test's outcome (see the module docstring for the rules).

    ``reports``: each pytest process's final report as node id -> outcome (None where it wrote none).
    ``unconfirmable``: tests whose report entry may be their full canary's (:func:`full_canary_twins`):
    their pass stands on the event log alone.
    """

    def result(outcome: str, message: str = "") -> TestResult:
        points = test.points if outcome == PASSED else 0
        return TestResult(
            test.nodeid,
            test.name,
            points,
            test.points,
            test.gpu,
            outcome,
            truncate_text(message, MESSAGE_CHARS),
            test.visibility,
            test.area,
            test.extension,
        )

    if status == "void":
        return result("void", VOIDED)
    if seen is None or not seen.started:
        why = {
            "timeout": "the lab timed out before this test",
            "collection-error": "the tests did not collect",
            "crashed": "the test process died before this test",
            "stopped": "not run: the lab was stopped after too many timeouts in a row",
        }.get(status, "this test was not run")
        return result("not-run", why)
    if seen.over_limit:
        return result(
            "crashed",
            f"this test went over a resource cap ({seen.over_limit}); the grader stopped it "
            "and went on with the next test",
        )
    if seen.killed_after_s is not None:
        return result(
            "timeout",
            f"this test ran over its time limit of {seen.killed_after_s:g} s and "
            "did not stop when interrupted; the grader killed it and went on with the next test",
        )
    if not seen.finished and "teardown" not in seen.phases:
        return result(
            "timeout" if status == "timeout" else "crashed", "the test process died or was stopped during this test"
        )
    for when in ("setup", "call", "teardown"):
        outcome, message = seen.phases.get(when, ("", ""))
        if outcome == "failed":
            if seen.timed_out or ("Timeout" in message and "pytest-timeout" in message):  # (older runs)
                return result("timeout", message)
            return result("failed" if when == "call" else "error", message)
        if outcome == "skipped":
            if test.gpu and gpu != "on":
                return result(PENDING, "needs a CUDA GPU: graded when run on one")
            if test.gpu:
                return result("failed", f"skipped although --gpu on promised a GPU: {message}")
            return result("skipped", f"skipped: {message}")
    if seen.phases.get("call", ("",))[0] != "passed":
        return result("crashed", "the test did not report a result")
    reported = reports[seen.process] if seen.process < len(reports) else None
    if reported is not None and test.nodeid not in unconfirmable and reported.get(test.nodeid) != "passed":
        return result("failed", "the final pytest report does not confirm this pass")
    return result(PASSED)


def talking_point_results(lab: LabRubric, tests: tuple[TestResult, ...]) -> tuple[TalkingPointResult, ...]:
    """Each talking point is "evidence: passed" when every case of every evidence test passed.

    Evidence comes from the tests students hold: held-out tests never count for (or against) it.
    """
    tests = tuple(test for test in tests if not test.heldout)
    points = []
    for point in lab.talking_points:
        cases = {test.nodeid.split("::", 1)[-1]: test.outcome for test in tests if test.name in point.evidence}
        missing = [name for name in point.evidence if not any(t.name == name for t in tests)]
        outcomes = set(cases.values())
        if cases and not missing and outcomes == {PASSED}:
            status = EVIDENCE_PASSED
        elif cases and not missing and outcomes <= {PASSED, PENDING}:
            status = EVIDENCE_PENDING
        else:
            status = NOT_YET
        cases.update({name: "missing from the tests" for name in missing})
        points.append(TalkingPointResult(point.id, point.kind, point.text, point.evidence, status, cases))
    return tuple(points)


#: What students read when a held-out part did not end normally (its own reasons are instructor data).
HELDOUT_REASONS = {
    "void": "the held-out tests' run is void: the submission's code altered pytest's results or the grader's "
    "results channel in-process",
    "collection-error": "the held-out tests could not be collected with this submission (does importing your "
    "code fail, or depend on the visible tests?)",
    "timeout": "the held-out tests ran over their time budget and were stopped",
    "crashed": "the held-out tests' process ended early (os._exit, sys.exit, a crash in native code, too much output?)",
    "stopped": "too many held-out tests in a row ran out of time: the rest were not run",
    GRADER_ERROR: "the grader could not run the held-out tests (not the submission's fault); " + GRADER_ERROR_ADVICE,
}


def _part(
    lab: LabRubric, run: LabRun | None, tests: tuple[RubricTest, ...], gpu: str, not_run: tuple[str, str]
) -> tuple[str, str, tuple[TestResult, ...], float]:
    """Score one part's tests from its run: (status, reason, results, wall seconds)."""
    if run is None:
        status, reason, seen, reports, wall = *not_run, {}, (), 0.0
    else:
        seen, wall = with_full_canaries_that_died(observe(run.events), run.events), run.wall_s
        reports = tuple(_report_outcomes(report) for report in run.reports)
        status, reason = lab_status(run, seen)
    unconfirmable = full_canary_twins(run.events) if run is not None else frozenset()
    results = tuple(score_test(test, seen.get(test.nodeid), reports, status, gpu, unconfirmable) for test in tests)
    if status == "stopped" and run is not None:
        reason = stop_reason(_stop_streak(run), sum(test.outcome == "not-run" for test in results))
    if run is not None and run.report_problems:
        reason = "; ".join([*([reason] if reason else []), report_problem_note(run)])
    return status, reason, results, wall


#: What a student reads when the held-out tests' process left a JSON report the supervisor would not take.
#: Fixed text: the problem's own words (a parse error's line and column, a size, a key) are what the
#: process chose, so they could spell the held-out tests; they stay in ``raw/<lab>/heldout/run.json``.
HELDOUT_REPORT_NOTE = (
    "held-out tests: pytest's JSON report was not used (the submission's code left one the grader would not "
    "take; what was wrong is kept for your instructor); the tests were scored from the grader's own record of them"
)


def report_problem_note(run: LabRun) -> str:
    """What the lab's reason says when the submission left a JSON report the supervisor would not take."""
    return (
        f"{'; '.join(run.report_problems)} (the submission's code left it so; the tests were scored from "
        "the grader's own record of them)"
    )


def score_lab(
    lab: LabRubric,
    run: LabRun | LabRuns | None,
    gpu: str = "auto",
    not_run_reason: str = "",
    not_run_status: str = "not-run",
) -> LabResult:
    """Score one lab's run (both its parts) against its pristine rubric (pure).

    ``not_run_status``/``not_run_reason`` describe a lab without a run (e.g. ``grader-error``).
    """
    if lab.error is not None:
        return LabResult(
            lab.lab, lab.title, lab.package, 0, 0, 0, UNAVAILABLE, f"this lab cannot be graded: {lab.error}"
        )
    runs = run if isinstance(run, LabRuns) or run is None else LabRuns(run)
    not_run = (not_run_status, not_run_reason or "the lab was not run")
    visible_tests = tuple(test for test in lab.tests if not test.heldout)
    heldout_tests = tuple(test for test in lab.tests if test.heldout)
    status, reason, visible, wall = _part(lab, runs.visible if runs else None, visible_tests, gpu, not_run)
    heldout: tuple[TestResult, ...] = ()
    if heldout_tests:
        later = not_run if runs is None or runs.visible is None else ("not-run", "the held-out tests were not run")
        h_status, _, heldout, h_wall = _part(lab, runs.heldout if runs else None, heldout_tests, gpu, later)
        wall += h_wall
        if (status == "graded" and h_status != "graded") or (h_status == "void" and status != "void"):
            status, reason = h_status, HELDOUT_REASONS.get(h_status, f"held-out tests: {h_status}")
        if runs is not None and runs.heldout is not None and runs.heldout.report_problems:
            reason = "; ".join([*([reason] if reason else []), HELDOUT_REPORT_NOTE])
    order = {test.nodeid: index for index, test in enumerate(lab.tests)}
    tests = tuple(sorted(visible + heldout, key=lambda test: order[test.nodeid]))
    if status == "void":  # tampering in one part voids the other's points too
        tests = tuple(replace(test, points=0, outcome="void", message=VOIDED) for test in tests)
    main = [test for test in tests if not test.extension]  # an optional extension's points are shown apart
    score = sum(test.points for test in main)
    pending = sum(test.max_points for test in main if test.outcome == PENDING)
    return LabResult(
        lab.lab,
        lab.title,
        lab.package,
        score,
        lab.max_score,
        pending,
        status,
        reason,
        round(wall, 3),
        tests,
        talking_point_results(lab, tests),
        lab.steps,
    )


def _stop_streak(run: LabRun | None) -> int:
    stops = [event for event in (run.events if run else ()) if event.get("event") == STOPPED_EVENT]
    return int(stops[-1].get("streak") or 0) if stops else 0


def score_submission(
    rubric: Rubric,
    runs: dict[str, LabRun | LabRuns | None],
    *,
    submission: str,
    gpu: str = "auto",
    flags: tuple[str, ...] = (),
    notes: tuple[str, ...] = (),
    not_run_reason: str = "",
    not_run_status: str = "not-run",
    not_run_labs: dict[str, tuple[str, str]] | None = None,
    lab_notes: dict[str, str] | None = None,
) -> SubmissionResult:
    """Score every lab of ``rubric`` (pure): runs missing from ``runs`` score 0 as ``not_run_status``.

    ``not_run_labs`` gives some labs their own (status, reason) when they have no run (e.g. the cluster
    task grading them was killed, while another task graded the other labs); ``lab_notes`` adds what
    the runner knows to a lab's reason (e.g. Slurm killed its test process for memory).
    """
    labs = []
    for lab in rubric.labs:
        status, reason = (not_run_labs or {}).get(lab.lab, (not_run_status, not_run_reason))
        scored = score_lab(lab, runs.get(lab.lab), gpu, not_run_reason=reason, not_run_status=status)
        note = (lab_notes or {}).get(lab.lab)
        labs.append(replace(scored, reason=f"{note}; {scored.reason}" if scored.reason else note) if note else scored)
    labs = tuple(labs)
    void = [f"{lab.lab}: {lab.reason}" for lab in labs if lab.status == "void"]
    refused = [flag for lab in rubric.labs for flag in introspection_flags(lab.lab, runs.get(lab.lab))]
    return SubmissionResult(submission, gpu, labs, tuple(flags) + tuple(void) + tuple(refused), tuple(notes))


def introspection_flags(lab: str, runs: LabRun | LabRuns | None) -> list[str]:
    """One review flag per distinct refusal of the introspection guard in a lab's runs (file, line, what)."""
    parts = [runs] if isinstance(runs, LabRun) else [runs.visible, runs.heldout] if runs is not None else []
    flags = {
        f"{lab}: introspection: {event.get('file')}:{event.get('line')} tried {event.get('what')} "
        "while graded (refused)"
        for run in parts
        if run is not None
        for event in run.events
        if event.get("event") == INTROSPECTION_EVENT
    }
    return sorted(flags)


def grader_error_result(
    rubric: Rubric, error: BaseException, *, submission: str, gpu: str = "auto"
) -> SubmissionResult:
    """The result of a submission the grader failed on (a bug, a runner that would not start, a full
    disk): every lab scores 0 with status ``grader-error`` (pure).

    What the student reads names only the error's type: its message and traceback may hold the grader's
    paths and the names of held-out files (``No space left on device: '/tmp/grader-x/.../heldout/...'``).
    They are the instructor's: :func:`grader_error_detail`, which the runners write to
    :data:`GRADER_ERROR_FILE` beside the result."""
    reason = f"grader error ({type(error).__name__}, details in {GRADER_ERROR_FILE}); {GRADER_ERROR_ADVICE}"
    return score_submission(
        rubric,
        {},
        submission=submission,
        gpu=gpu,
        flags=(reason,),
        not_run_reason=reason,
        not_run_status=GRADER_ERROR,
    )


def grader_error_detail(error: BaseException) -> str:
    """The error and its traceback, for the instructor's :data:`GRADER_ERROR_FILE` (never a student's text)."""
    return truncate_text("".join(traceback.format_exception(error)), 20_000)


def rescore(out: Path) -> SubmissionResult:
    """Score a graded folder again from its saved rubric and raw runs (no student code runs).

    Raises:
        FileNotFoundError: when ``out`` holds no ``rubric.json`` (it is not a graded submission).
    """
    rubric_path = out / RUBRIC_FILE
    if not rubric_path.is_file():
        raise FileNotFoundError(f"{out} holds no {RUBRIC_FILE}: not a folder written by `grader run`")
    rubric = Rubric.read(rubric_path)
    meta = read_json(out / SUBMISSION_FILE) or {}
    runs = load_lab_runs(out, [lab.lab for lab in rubric.labs])
    return score_submission(
        rubric,
        runs,
        submission=meta.get("submission", out.name),
        gpu=meta.get("gpu", "auto"),
        flags=tuple(meta.get("flags", ())),
        notes=tuple(meta.get("notes", ())),
        not_run_reason=meta.get("not_run_reason", ""),
        not_run_status=meta.get("not_run_status", "not-run"),
        not_run_labs={
            lab: (entry["status"], entry["reason"]) for lab, entry in (meta.get("not_run_labs") or {}).items()
        },
        lab_notes=meta.get("lab_notes"),
    )


# ---------------------------------------------------------------- the `score` verb
