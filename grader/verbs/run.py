"""The ``run`` verb: grade one submission into a folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.course.labs import CourseError
from grader.execute.preflight import GraderEnvironmentError, check_output_folder
from grader.runners.local import grade_submission, own_grader_problem
from grader.scoring.feedback import summary_line
from grader.scoring.results import EXIT_USAGE
from grader.verbs.options import add_course_options, prepare, report_grader_faults
from labkit.environment import current_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submission", type=Path, help="a student's copy of the course (folder or .zip)")
    parser.add_argument("--out", type=Path, required=True, help="folder for summary.json, feedback and raw reports")
    add_course_options(parser)


def main(args: argparse.Namespace) -> int:
    if not args.submission.exists():  # a typo, not a student's broken submission (that one still gets a row)
        print(
            f"grader run: {args.submission} does not exist (expected a copy of the course: a folder or a .zip)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        problem = own_grader_problem(args.submission)
        if problem:
            raise CourseError(problem)
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
