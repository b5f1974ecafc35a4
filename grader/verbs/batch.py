"""The ``batch`` verb: grade a folder of submissions in parallel."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from grader.course.labs import CourseError
from grader.execute.preflight import GraderEnvironmentError, check_output_folder
from grader.runners.batch import (
    BATCH_FILE,
    discover_submissions,
    grade_all,
    jobs_note,
    only_options,
    row_line,
    select_students,
)
from grader.runners.container import ContainerError
from grader.runners.local import grade_submission
from grader.scoring.results import EXIT_GRADER_FAULT, EXIT_OK, EXIT_USAGE, GRADER_FAULTS
from grader.verbs.options import add_container_options, add_course_options, prepare, runner_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submissions_dir", type=Path, help="one folder or .zip per student")
    parser.add_argument("--out", type=Path, required=True, help="graded folder (one sub-folder per student)")
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=1,
        help="submissions graded at once (default 1; more than the machine's cores only share them)",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=None,
        help="student ids to grade (comma-separated, or the option repeated); batch.json keeps the other rows",
    )
    add_course_options(parser)
    add_container_options(parser)


def main(args: argparse.Namespace) -> int:
    try:
        check_output_folder(args.out)
        setup = prepare(args, check_environment=not args.container, isolate=not args.container)
        submissions = discover_submissions(args.submissions_dir, out=args.out)
        runner = runner_from_args(args) or grade_submission
    except (CourseError, ContainerError, GraderEnvironmentError) as error:
        print(f"grader batch: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.only:
        submissions = select_students(submissions, args.only)
    if not submissions:
        print(f"grader batch: no submissions in {args.submissions_dir}", file=sys.stderr)
        return EXIT_USAGE
    if note := jobs_note(args.jobs):
        print(note, file=sys.stderr)
    start = time.monotonic()
    rows = grade_all(submissions, args.out, setup, jobs=args.jobs, runner=runner, keep_other_rows=bool(args.only))
    for row in rows:
        print(row_line(row))
    print(
        f"graded {len(rows)} submissions in {time.monotonic() - start:.1f} s with -j {args.jobs}: "
        f"{args.out}/{BATCH_FILE}"
    )
    failed = [row.student for row in rows if GRADER_FAULTS & set(row.statuses.values())]
    if failed:
        print(
            f"\nGRADER ERROR for {len(failed)} submission(s), not their fault (the error is in each one's "
            f"feedback.md, its traceback in grader-error.txt): {', '.join(failed)}\nFix the cause, then grade "
            f"them again with {only_options(failed)}",
            file=sys.stderr,
        )
        return EXIT_GRADER_FAULT
    return EXIT_OK
