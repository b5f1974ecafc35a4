"""The ``selfcheck`` verb (``nox -s grade``): grade the reference solutions and the untouched starters.

This is the course's main job: it proves, end to end through the real grading path (sandbox,
subprocess per lab, scoring), that each lab is gradable:

- the **reference**: ``solutions/<package>/<editable files>`` dropped over the starters must earn every
  CPU point (GPU tests may be pending), the held-out tests' included;
- the **untouched starter**: the course as students receive it must score 0.

Both summaries are printed. With ``--record-times`` the reference's time on every test it passed is
written to each lab's ``reference_times.json`` (:mod:`grader.scoring.reference_recording`), where the grader's
time limits come from: its CPU time and wall time, with the compilers' caches off (every compile from
scratch, so a limit holds however warm a graded run's caches are) and a limit of
``unmeasured_test_timeout_s`` CPU seconds on every test (the old limits must not cut a recording short);
the reference is then graded alone, so that the starter does not share its CPUs. With ``--repeat N`` the
reference is graded N times (each grading a fresh process per part, with fresh canary seeds and places, ``-j`` at
once), and every one of them must earn every CPU point: a grader that costs a correct submission points at random
(a canary, a time limit, a fixture built in the wrong test) shows here, and the rounds that lost points are named
with the tests that failed. With ``--container IMAGE`` each is
graded in its own container of the course image (network off), which checks the image too. Labs that are not written
yet (no ``lab.toml`` or ``test_lab.py``) are listed and skipped; the exit status is 1 only when a ready lab breaks one
of the two rules.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from grader.course.labs import CourseError, make_reference_submission
from grader.execute.preflight import GraderEnvironmentError
from grader.runners.batch import grade_all, usable_cores
from grader.runners.container import ContainerError
from grader.runners.local import grade_submission
from grader.scoring.feedback import summary_line
from grader.scoring.reference_recording import record_times
from grader.scoring.results import PASSED, SubmissionResult
from grader.scoring.score import rescore
from grader.verbs.options import add_container_options, add_course_options, prepare, runner_from_args

REFERENCE, STARTER = "reference", "starter"


def problems_of(reference: SubmissionResult, starter: SubmissionResult) -> list[str]:
    """Every way the two results break the rules of the module docstring (pure)."""
    problems = []
    for lab in reference.labs:
        if lab.status == "unavailable":
            problems.append(f"{lab.lab}: {lab.reason.splitlines()[0]}")
        elif (
            lab.status != "graded"
            or lab.score + lab.pending != lab.max_score
            or lab.extension.score + lab.extension.pending != lab.extension.max_score
        ):
            failing = [
                f"{t.nodeid.split('::', 1)[-1]} ({t.outcome}: {t.message.splitlines()[0] if t.message else ''})"
                for t in lab.tests
                if t.outcome not in (PASSED, "pending")
            ]
            problems.append(
                f"{lab.lab}: the reference scores {lab.score}/{lab.max_score} ({lab.status}"
                f"{': ' + lab.reason if lab.reason else ''}); failing: {'; '.join(failing) or 'none'}"
            )
    for lab in starter.labs:
        if lab.status == "unavailable":
            continue
        if lab.score or lab.extension.score:
            passing = [t.nodeid.split("::", 1)[-1] for t in lab.tests if t.points]
            problems.append(
                f"{lab.lab}: the untouched starter scores {lab.score}/{lab.max_score}: "
                f"graded tests pass without student code: {', '.join(passing)}"
            )
        elif lab.status != "graded":
            problems.append(f"{lab.lab}: the untouched starter is not graded normally ({lab.status}: {lab.reason})")
    return problems


def _print_result(title: str, result: SubmissionResult) -> None:
    print(f"\n== {title}: {summary_line(result)}")
    for lab in result.labs:
        pending = f" (+{lab.pending} pending GPU)" if lab.pending else ""
        split = (
            f" (visible {lab.visible.score}/{lab.visible.max_score}, "
            f"held-out {lab.heldout.score}/{lab.heldout.max_score})"
        )
        print(
            f"   {lab.lab} {lab.title}: {lab.score}/{lab.max_score}{pending}{split if lab.heldout.max_score else ''} "
            f"[{lab.status}] in {lab.wall_s:.1f} s"
        )
        if lab.reason:
            print(f"      {lab.reason.splitlines()[0][:200]}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="keep both graded folders here (default: a temp folder)")
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=min(2, usable_cores()),
        help="grade the two submissions at once (default: 2, or 1 on a machine with one core)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="grade the reference N times; every grading must keep every point (default: 1)",
    )
    parser.add_argument(
        "--record-times",
        action="store_true",
        help="write each lab's reference_times.json from the reference's run (time limits derive from it)",
    )
    add_course_options(parser)
    add_container_options(parser)


def reference_names(repeat: int) -> list[str]:
    """The graded folders' names of ``repeat`` gradings of the reference (one: just ``reference``)."""
    return [REFERENCE] if repeat == 1 else [f"{REFERENCE}-{round_:02d}" for round_ in range(1, repeat + 1)]


def repeat_problems(results: dict[str, SubmissionResult], starter: SubmissionResult) -> list[str]:
    """:func:`problems_of` for every grading of the reference, each problem under its round's name."""
    problems = [f"{name}: {problem}" for name, result in results.items() for problem in problems_of(result, starter)]
    return sorted(set(problems)) if len(results) == 1 else problems


def _print_rounds(results: dict[str, SubmissionResult]) -> None:
    print(f"\n== the reference graded {len(results)} times:")
    for name, result in results.items():
        labs = ", ".join(
            f"{lab.lab} {lab.score}/{lab.max_score}" + (f" (+{lab.pending} pending GPU)" if lab.pending else "")
            for lab in result.labs
        )
        print(f"   {name}: {labs}")


def main(args: argparse.Namespace) -> int:
    if args.repeat < 1 or (args.repeat > 1 and args.record_times):
        print("grader selfcheck: --repeat takes a count of 1 or more, and not with --record-times", file=sys.stderr)
        return 2
    try:
        setup = prepare(args, check_environment=not args.container, isolate=not args.container)
    except CourseError as error:
        print(f"grader selfcheck: nothing to grade yet: {error}")
        return 0
    except GraderEnvironmentError as error:
        print(f"grader selfcheck: {error}", file=sys.stderr)
        return 2
    try:
        runner = runner_from_args(args) or grade_submission
    except ContainerError as error:
        print(f"grader selfcheck: {error}", file=sys.stderr)
        return 2
    if args.record_times:  # every compile from scratch, and limits that time nothing out (see record_times)
        limits = replace(setup.options.limits, test_timeout_s=setup.options.limits.unmeasured_test_timeout_s)
        setup = replace(setup, options=replace(setup.options, cold_caches=True, limits=limits))
    with tempfile.TemporaryDirectory(prefix="grader-selfcheck-") as scratch:
        out = args.out or Path(scratch) / "graded"
        reference = make_reference_submission(setup.course, Path(scratch) / REFERENCE)
        rounds = reference_names(args.repeat)
        submissions = [*((name, reference) for name in rounds), (STARTER, setup.course.root)]
        jobs = 1 if args.record_times else args.jobs
        grade_all(submissions, out, setup, jobs=jobs, runner=runner)
        results = {name: rescore(out / name) for name, _ in submissions}
        if args.record_times:
            print("\nreference times:")
            record_times(setup.course, setup.rubric, out / REFERENCE, setup.options.gpu)
    _print_result("reference solutions", results[rounds[0]])
    if len(rounds) > 1:
        _print_rounds({name: results[name] for name in rounds})
    _print_result("untouched starters", results[STARTER])
    for package, why in setup.course.not_ready.items():
        print(f"\nnote: {package} was skipped: {why}")
    problems = repeat_problems({name: results[name] for name in rounds}, results[STARTER])
    if problems:
        print("\nPROBLEMS:\n  " + "\n  ".join(problems))
        return 1
    every = f" in each of {len(rounds)} gradings" if len(rounds) > 1 else ""
    print(f"\nok: the reference earns every CPU point{every} and the untouched starters score 0")
    return 0
