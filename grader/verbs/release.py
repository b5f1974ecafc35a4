"""The ``release`` verb: build and verify the student distribution."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.course.labs import CourseError, load_course
from grader.release.build import ReleaseError, build_release, verify_release
from grader.runners.local import GradeOptions
from grader.verbs.options import add_course_options, limits_from_args
from labkit.scaffold import SCAFFOLDS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="folder for the student distribution (replaced)")
    parser.add_argument("--no-verify", action="store_true", help="only build, skip the install/collect/score checks")
    parser.add_argument(
        "--scaffold",
        choices=SCAFFOLDS,
        default="full",
        help="full: the starters as they are; minimal: without their step-by-step guidance blocks (contracts only)",
    )
    parser.add_argument(
        "--record-times",
        action="store_true",
        help="write each documented command's CPU time into the course's release_times.json "
        "(the check's CPU limits derive from it)",
    )
    add_course_options(parser)


def main(args: argparse.Namespace) -> int:
    try:
        course = load_course(args.course)
        entries = build_release(course, args.out, scaffold=args.scaffold)
    except CourseError as error:
        print(f"grader release: {error}", file=sys.stderr)
        return 2
    print(f"built the student distribution in {args.out} ({args.scaffold} scaffolding): {', '.join(entries)}")
    for package, why in course.not_ready.items():
        print(f"  note: {package} ships as it is but is not ready to grade ({why})")
    if args.no_verify:
        return 0
    options = GradeOptions(gpu="off", limits=limits_from_args(args))
    try:
        verify_release(
            args.out,
            options=options,
            cache_dir=None if args.no_cache else args.cache_dir,
            pristine=course,
            scaffold=args.scaffold,
            record_times=args.record_times,
        )
    except (ReleaseError, CourseError) as error:
        print(f"grader release: VERIFICATION FAILED: {error}", file=sys.stderr)
        return 1
    print("the release is verified")
    return 0
