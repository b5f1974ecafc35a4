"""The ``run`` verb: grade one submission, always leaving a result behind.

``grade_submission`` is the per-submission runner that ``batch`` calls for every student. It never
raises: a submission that cannot be read, a sandbox that cannot be built, even a bug in the grader,
all end in a ``summary.json`` whose labs score 0 with the reason (Gradescope's rule: a results file is
always written). Runners with the same signature (e.g. one running each submission in a container)
can replace it in :func:`grader.batch.grade_all`.

Flow: unpack -> sandbox (pristine course + editable files + canary) -> one pytest process per lab
(:mod:`grader.runner`) -> score the saved artifacts (:func:`grader.score.rescore`, so the first score
and any regrade are the same computation) -> ``summary.json``, ``feedback.md``, ``results.json``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from labkit.environment import current_command
from labkit.labspec import COURSE_ROOT, LabSpec
from grader.artifacts import RAW_DIR, RUBRIC_FILE, write_submission_meta
from grader.course import Course, CourseError, load_course
from grader.feedback import summary_line, write_outputs
from grader.results import EXIT_GRADER_FAULT, EXIT_OK, EXIT_USAGE, GRADER_ERROR, SubmissionResult
from grader.preflight import GraderEnvironmentError, check_grading_environment, check_output_folder
from grader.rubric import DEFAULT_CACHE_DIR, Rubric, build_rubric, describe_rubric
from grader.runner import GPU_MODES, RunLimits, run_lab
from grader.sandbox import SubmissionError, build_sandbox, new_canary_name, unpack_submission
from grader.score import grader_error_result, rescore


@dataclass(frozen=True)
class GradeOptions:
    """How submissions are graded (the same for every student of a batch).

    Attributes:
        gpu: ``auto`` (GPU tests run where CUDA exists, else pending), ``off`` (hide CUDA: all GPU
            tests pending), ``on`` (a GPU is promised: a skipped GPU test fails).
        limits: per-test and per-lab time limits, output caps.
        python: the interpreter that runs pytest (the course environment's).
        keep_sandbox: keep the sandbox under ``OUT/sandbox`` for debugging.
        threads: PyTorch's threads in each graded process (``OMP_NUM_THREADS`` and
            ``TORCHINDUCTOR_COMPILE_THREADS``); ``None`` leaves the environment's or PyTorch's default.
            Submissions graded side by side must share the cores: each process's default pool is
            every core, and two such pools on one machine's cores make a test up to 200x slower.
    """

    gpu: str = "auto"
    limits: RunLimits = field(default_factory=RunLimits)
    python: str = sys.executable
    keep_sandbox: bool = False
    threads: int | None = None


@dataclass(frozen=True)
class GradingSetup:
    """What every submission of a run or batch is graded against."""

    course: Course
    labs: list[LabSpec]
    rubric: Rubric
    options: GradeOptions


def _meta(out: Path, **fields) -> None:
    write_submission_meta(out, fields)


def _run_labs(setup: GradingSetup, folder: Path, out: Path, scratch: Path, name: str,
              only_labs: Collection[str] | None) -> None:
    options = setup.options
    canary = new_canary_name()
    counts = {lab.lab: len(lab.tests) + 1 for lab in setup.rubric.labs}
    sandbox = scratch / "course"
    overlay = build_sandbox(setup.course, setup.labs, folder, sandbox, canary=canary, canary_counts=counts)
    _meta(out, submission=name, gpu=options.gpu, flags=overlay.flags, notes=overlay.notes, taken=overlay.taken,
          canary=canary)
    for lab in setup.rubric.labs:
        if lab.error is None and (only_labs is None or lab.lab in only_labs):
            run_lab(sandbox, lab, out / RAW_DIR / lab.lab, canary=canary, gpu=options.gpu, limits=options.limits,
                    python=options.python, threads=options.threads)
    if options.keep_sandbox:
        shutil.copytree(sandbox, out / "sandbox", dirs_exist_ok=True)


def grade_submission(submission: Path, out: Path, setup: GradingSetup, name: str | None = None, *,
                     only_labs: Collection[str] | None = None) -> SubmissionResult:
    """Grade ``submission`` (a folder or ``.zip``) into ``out``; never raises (see the module docstring).

    ``only_labs`` (lab ids) runs just those labs and keeps the other labs' runs already in ``out``: a
    cluster grades a submission's CPU labs and its GPU labs in two tasks (:mod:`grader.slurm_runner`).
    """
    name = name or submission.resolve().name.removesuffix(".zip")
    out.mkdir(parents=True, exist_ok=True)
    _clear_runs(out, only_labs)
    setup.rubric.write(out / RUBRIC_FILE)
    try:
        with tempfile.TemporaryDirectory(prefix="grader-") as scratch:
            folder = unpack_submission(submission, Path(scratch))
            _run_labs(setup, folder, out, Path(scratch), name, only_labs)
        result = rescore(out)
    except SubmissionError as error:
        _meta(out, submission=name, gpu=setup.options.gpu, flags=[str(error)], not_run_reason=str(error),
              not_run_status="not-run")
        result = rescore(out)
    except Exception as error:  # noqa: BLE001 - the grader's own bug must still leave a row
        result = grader_error_result(setup.rubric, error, submission=name, gpu=setup.options.gpu)
        _meta(out, submission=name, gpu=setup.options.gpu, flags=list(result.flags), notes=list(result.notes),
              not_run_reason=result.flags[0], not_run_status=GRADER_ERROR)
        _clear_runs(out, only_labs)
        if only_labs is not None:
            try:  # the other labs' runs (graded by another task) keep their scores
                result = rescore(out)
            except Exception:  # noqa: BLE001 - even unreadable files must not lose the row
                pass
    write_outputs(result, out)
    return result


def _clear_runs(out: Path, only_labs: Collection[str] | None) -> None:
    """Remove the raw runs this grading replaces (all of them, or those of ``only_labs``)."""
    for stale in ([out / RAW_DIR] if only_labs is None else [out / RAW_DIR / lab for lab in only_labs]):
        shutil.rmtree(stale, ignore_errors=True)


# ---------------------------------------------------------------- options shared by the grading verbs

def add_course_options(parser: argparse.ArgumentParser) -> None:
    """``--course``, ``--labs``, ``--gpu``, timeouts and the rubric cache (run, batch, selfcheck)."""
    parser.add_argument("--course", type=Path, default=COURSE_ROOT, help="the pristine course root (default: this repository)")
    parser.add_argument("--labs", default=None, help="comma-separated lab ids or packages (default: every ready lab)")
    parser.add_argument("--gpu", choices=GPU_MODES, default="auto", help="GPU tests: auto (pending without CUDA), on, off")
    defaults = RunLimits()
    times = parser.add_argument_group("time limits", "derived from the reference solution's recorded times "
                                      "(each lab's reference_times.json); each option overrides one part")
    times.add_argument("--test-timeout", type=float, default=None,
                       help="one limit in seconds for every test (default: --time-factor x the reference's time "
                            "on that test, at least --min-test-timeout)")
    times.add_argument("--lab-timeout", type=float, default=None,
                       help="seconds per lab (default: the sum of its tests' limits plus a start-up allowance)")
    times.add_argument("--time-factor", type=float, default=defaults.time_factor,
                       help=f"a test may take this many times the reference's time (default {defaults.time_factor:g})")
    times.add_argument("--min-test-timeout", type=float, default=defaults.min_test_timeout_s,
                       help=f"the least limit of any test, in seconds (default {defaults.min_test_timeout_s:g})")
    times.add_argument("--max-consecutive-timeouts", type=int, default=defaults.max_consecutive_timeouts,
                       help="after this many tests in a row ran out of time, the rest of the lab is not run "
                            f"(default {defaults.max_consecutive_timeouts}; 0: never)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where pristine rubrics are cached")
    parser.add_argument("--no-cache", action="store_true", help="collect the pristine rubric again")
    parser.add_argument("--keep-sandbox", action="store_true", help="keep each sandbox under OUT/sandbox")


def prepare(args: argparse.Namespace, *, check_environment: bool = True) -> GradingSetup:
    """Load the course, check that this machine can grade it, pick the labs, build (or read the cached) rubric.

    Args:
        args: the parsed course options (:func:`add_course_options`).
        check_environment: run :func:`grader.preflight.check_grading_environment` first (off when each
            submission is graded in a container of the course image, which has its own environment).

    Raises:
        CourseError: no ready lab, or an unknown ``--labs`` entry.
        GraderEnvironmentError: this interpreter cannot run the graded tests (see :mod:`grader.preflight`).
    """
    course = load_course(args.course)
    if check_environment:
        check_grading_environment(course.root, command=current_command())
    for package, why in course.not_ready.items():
        print(f"note: {package} is not ready to grade ({why}): skipped", file=sys.stderr)
    labs = course.select(args.labs.split(",") if args.labs else None)
    if not labs:
        raise CourseError(f"no lab of {course.root} is ready to grade (each needs lab.toml and test_lab.py)")
    print(f"collecting the pristine rubric of {', '.join(spec.id for spec in labs)} ...", file=sys.stderr)
    rubric = build_rubric(course, labs, None if args.no_cache else args.cache_dir)
    for lab in rubric.labs:
        print(f"  {describe_rubric(lab)}", file=sys.stderr)
    limits = limits_from_args(args)
    for lab in rubric.labs:  # (GPU tests are timed on a GPU machine: not worth a note on every run)
        untimed = sum(test.reference_s is None and not test.gpu for test in lab.tests)
        if lab.error is None and untimed and limits.test_timeout_s is None and course.solutions.is_dir():
            print(f"  note: {lab.lab}: {untimed} of {len(lab.tests)} tests have no recorded reference time (limit "
                  f"{limits.unmeasured_test_timeout_s:g} s each); record them with "
                  "`python -m grader selfcheck --record-times`", file=sys.stderr)
    return GradingSetup(course, labs, rubric, GradeOptions(args.gpu, limits, keep_sandbox=args.keep_sandbox))


def limits_from_args(args: argparse.Namespace) -> RunLimits:
    """The :class:`RunLimits` the time-limit options of :func:`add_course_options` ask for."""
    return RunLimits(test_timeout_s=args.test_timeout, lab_timeout_s=args.lab_timeout, time_factor=args.time_factor,
                     min_test_timeout_s=args.min_test_timeout, max_consecutive_timeouts=args.max_consecutive_timeouts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submission", type=Path, help="a student's copy of the course (folder or .zip)")
    parser.add_argument("--out", type=Path, required=True, help="folder for summary.json, feedback and raw reports")
    add_course_options(parser)


def report_grader_faults(results: list[SubmissionResult], command: str) -> int:
    """Print every lab the grader failed on (never the students' fault) and return the exit status."""
    faults = [(result.submission, lab) for result in results for lab in result.grader_faults]
    if not faults:
        return EXIT_OK
    print(f"\nGRADER ERROR on {len(faults)} lab(s): these were not graded, and are not the students' fault:",
          file=sys.stderr)
    for student, lab in faults:
        print(f"  {student} {lab.lab} [{lab.status}]: {lab.reason.splitlines()[0][:400] if lab.reason else ''}",
              file=sys.stderr)
    print(f"Fix the cause, then run `{command}` again.", file=sys.stderr)
    return EXIT_GRADER_FAULT


def main(args: argparse.Namespace) -> int:
    if not args.submission.exists():  # a typo, not a student's broken submission (that one still gets a row)
        print(f"grader run: {args.submission} does not exist (expected a copy of the course: a folder or a .zip)",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        check_output_folder(args.out)
        setup = prepare(args)
    except (CourseError, GraderEnvironmentError) as error:
        print(f"grader run: {error}", file=sys.stderr)
        return EXIT_USAGE
    result = grade_submission(args.submission, args.out, setup)
    print(summary_line(result))
    for flag in result.flags:
        print(f"  FLAG {flag}")
    print(f"wrote {args.out}/summary.json, feedback.md, results.json")
    return report_grader_faults([result], "python " + current_command())
