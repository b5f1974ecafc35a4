"""Command-line options shared by the grading verbs, and turning them into a grading setup."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from grader.course.labs import CourseError, load_course
from grader.course.rubric import describe_rubric
from grader.evidence.text import key_lines
from grader.execute.collect import DEFAULT_CACHE_DIR
from grader.execute.command import GPU_MODES
from grader.execute.isolation import choose_isolation
from grader.execute.limits import GRADING_MARGIN_S, GiB, RunLimits
from grader.execute.preflight import check_grading_environment, check_scratch_space
from grader.runners.container import ENGINE_ENV_VAR, ContainerLimits, ContainerRunner, find_engine
from grader.runners.local import GradeOptions, GradingSetup
from grader.scoring.results import EXIT_GRADER_FAULT, EXIT_OK, SubmissionResult
from labkit.environment import current_command
from labkit.labspec import COURSE_ROOT


def add_course_options(parser: argparse.ArgumentParser) -> None:
    """``--course``, ``--labs``, ``--gpu``, timeouts and the rubric cache (run, batch, selfcheck)."""
    parser.add_argument(
        "--course", type=Path, default=COURSE_ROOT, help="the pristine course root (default: this repository)"
    )
    parser.add_argument("--labs", default=None, help="comma-separated lab ids or packages (default: every ready lab)")
    parser.add_argument(
        "--gpu", choices=GPU_MODES, default="auto", help="GPU tests: auto (pending without CUDA), on, off"
    )
    defaults = RunLimits()
    times = parser.add_argument_group(
        "time limits",
        "in CPU seconds, derived from the reference solution's "
        "recorded times (each lab's reference_times.json), with a wall-clock "
        "backstop; each option overrides one part",
    )
    times.add_argument(
        "--test-timeout",
        type=float,
        default=None,
        help="one limit in CPU seconds for every test (default: --time-factor x the reference's "
        "CPU time on that test, at least --min-test-timeout)",
    )
    times.add_argument(
        "--lab-timeout",
        type=float,
        default=None,
        help="wall-clock seconds per lab part (default: the sum of its tests' backstops plus a start-up allowance)",
    )
    times.add_argument(
        "--time-factor",
        type=float,
        default=defaults.time_factor,
        help=f"a test may take this many times the reference's CPU time (default {defaults.time_factor:g})",
    )
    times.add_argument(
        "--min-test-timeout",
        type=float,
        default=defaults.min_test_timeout_s,
        help=f"the least CPU limit of any test, in seconds (default {defaults.min_test_timeout_s:g})",
    )
    times.add_argument(
        "--wall-factor",
        type=float,
        default=defaults.wall_factor,
        help="a test's wall-clock backstop is this many times its CPU limit (it stops a test that "
        f"sleeps or deadlocks; default {defaults.wall_factor:g})",
    )
    times.add_argument(
        "--max-consecutive-timeouts",
        type=int,
        default=defaults.max_consecutive_timeouts,
        help="after this many tests in a row ran out of time, from more than one handout step, the rest "
        f"of the lab is not run (default {defaults.max_consecutive_timeouts}; 0: never)",
    )
    caps = parser.add_argument_group(
        "resource caps",
        "what one graded pytest process and everything it starts "
        "may take; a test over a cap scores 0 and the lab goes on",
    )
    caps.add_argument(
        "--memory-cap",
        type=float,
        default=defaults.memory_cap_bytes / GiB,
        metavar="GIB",
        help=f"private memory, in GiB (default {defaults.memory_cap_bytes / GiB:g})",
    )
    caps.add_argument(
        "--disk-cap",
        type=float,
        default=defaults.disk_cap_bytes / GiB,
        metavar="GIB",
        help=f"what its home, caches and /tmp may hold, in GiB (default {defaults.disk_cap_bytes / GiB:g})",
    )
    caps.add_argument(
        "--process-cap",
        type=int,
        default=defaults.process_cap,
        metavar="N",
        help=f"processes at once (default {defaults.process_cap})",
    )
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where pristine rubrics are cached")
    parser.add_argument("--no-cache", action="store_true", help="collect the pristine rubric again")
    parser.add_argument("--keep-sandbox", action="store_true", help="keep each sandbox under OUT/sandbox")
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="grade without isolation where bubblewrap is missing: graded code can then read the "
        "solutions, held-out tests, your files and environment, and use the network",
    )


def prepare(args: argparse.Namespace, *, check_environment: bool = True, isolate: bool = True) -> GradingSetup:
    """Load the course, check that this machine can grade it, pick the labs, build (or read the cached) rubric.

    Args:
        args: the parsed course options (:func:`add_course_options`).
        check_environment: run :func:`grader.execute.preflight.check_grading_environment` first (off when each
            submission is graded in a container of the course image, which has its own environment).
        isolate: choose how graded processes are isolated here (off when another process grades: a
            container or a cluster task chooses its own).

    Raises:
        CourseError: no ready lab, or an unknown ``--labs`` entry.
        GraderEnvironmentError: this interpreter cannot run the graded tests (see :mod:`grader.execute.preflight`).
        IsolationError: an instructor's course, no working bubblewrap and no ``--unsafe-no-sandbox``.
    """
    course = load_course(args.course)
    check_scratch_space()
    if check_environment:
        check_grading_environment(course.root, command=current_command())
    isolation = None
    if isolate:
        isolation = choose_isolation(
            sys.executable,
            course.root,
            instructor_course=course.holds_instructor_material,
            unsafe=args.unsafe_no_sandbox,
        )
    for package, why in course.not_ready.items():
        print(f"note: {package} is not ready to grade ({why}): skipped", file=sys.stderr)
    lab_ids = args.labs.split(",") if args.labs else None
    labs = course.select(lab_ids)
    if not labs:
        raise CourseError(f"no lab of {course.root} is ready to grade (each needs lab.toml and test_lab.py)")
    print(f"collecting the pristine rubric of {', '.join(spec.id for spec in labs)} ...", file=sys.stderr)
    limits = limits_from_args(args)
    setup = GradingSetup.for_course(
        course,
        GradeOptions(args.gpu, limits, keep_sandbox=args.keep_sandbox, isolation=isolation),
        lab_ids,
        None if args.no_cache else args.cache_dir,
    )
    for lab in setup.rubric.labs:
        print(f"  {describe_rubric(lab)}", file=sys.stderr)
    for lab in setup.rubric.labs:  # (GPU tests are timed on a GPU machine: not worth a note on every run)
        untimed = sum(test.reference_s is None and not test.gpu for test in lab.tests)
        if lab.error is None and untimed and limits.test_timeout_s is None and course.solutions.is_dir():
            print(
                f"  note: {lab.lab}: {untimed} of {len(lab.tests)} tests have no recorded reference time (limit "
                f"{limits.unmeasured_test_timeout_s:g} s each); record them with "
                "`python -m grader selfcheck --record-times`",
                file=sys.stderr,
            )
    return setup


def limits_from_args(args: argparse.Namespace) -> RunLimits:
    """The :class:`RunLimits` the time-limit and resource-cap options of :func:`add_course_options` ask for."""
    return RunLimits(
        test_timeout_s=args.test_timeout,
        lab_timeout_s=args.lab_timeout,
        time_factor=args.time_factor,
        min_test_timeout_s=args.min_test_timeout,
        wall_factor=args.wall_factor,
        max_consecutive_timeouts=args.max_consecutive_timeouts,
        memory_cap_bytes=int(args.memory_cap * GiB),
        disk_cap_bytes=int(args.disk_cap * GiB),
        process_cap=args.process_cap,
    )


def report_grader_faults(results: list[SubmissionResult], command: str) -> int:
    """Print every lab the grader failed on (never the students' fault) and return the exit status."""
    faults = [(result.submission, lab) for result in results for lab in result.grader_faults]
    if not faults:
        return EXIT_OK
    print(
        f"\nGRADER ERROR on {len(faults)} lab(s): these were not graded, and are not the students' fault:",
        file=sys.stderr,
    )
    for student, lab in faults:
        first, *rest = key_lines(lab.reason) or [""]
        print(f"  {student} {lab.lab} [{lab.status}]: {first[:400]}", file=sys.stderr)
        for line in rest:
            print(f"      {line[:400]}", file=sys.stderr)
    print(f"Fix the cause, then run `{command}` again.", file=sys.stderr)
    return EXIT_GRADER_FAULT


def add_container_options(parser: argparse.ArgumentParser) -> None:
    """``--container IMAGE`` and the container's engine and limits (the ``batch`` verb)."""
    group = parser.add_argument_group("containers", "grade each submission in its own container (network off)")
    group.add_argument(
        "--container",
        metavar="IMAGE",
        default=None,
        help="the course image; each submission is graded in its own container of it",
    )
    group.add_argument(
        "--engine", default=None, help=f"container engine command (default ${ENGINE_ENV_VAR}, else docker or podman)"
    )
    defaults = ContainerLimits()
    group.add_argument("--memory", default=defaults.memory, help=f"memory per container (default {defaults.memory})")
    group.add_argument(
        "--cpus", type=float, default=defaults.cpus, help=f"CPUs per container (default {defaults.cpus:g})"
    )
    group.add_argument(
        "--pids", type=int, default=defaults.pids, help=f"processes per container (default {defaults.pids})"
    )
    group.add_argument(
        "--wall-timeout",
        type=float,
        default=None,
        help=f"seconds before a container is killed (default: the labs' time budgets + {GRADING_MARGIN_S:g})",
    )


def runner_from_args(args: argparse.Namespace) -> ContainerRunner | None:
    """The container runner ``args`` ask for, or None without ``--container``.

    Raises:
        ContainerError: no usable engine.
    """
    if not args.container:
        return None
    engine = find_engine(args.engine)
    limits = ContainerLimits(memory=args.memory, cpus=args.cpus, pids=args.pids, wall_clock_s=args.wall_timeout)
    print(
        f"grading in containers of {args.container} with {shlex.join(engine)}: network off, "
        f"memory {limits.memory}, {limits.cpus:g} CPUs, {limits.pids} processes"
    )
    return ContainerRunner(args.container, engine, limits, unsafe_no_sandbox=args.unsafe_no_sandbox)
