"""The ``gradescope-bundle`` verb: an autograder zip for Gradescope."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.course.labs import CourseError
from grader.release.gradescope_bundle import build_bundle
from grader.runners.gradescope import CONFIG_FILE, COURSE_DIR
from labkit.labspec import COURSE_ROOT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True, help="the zip to write (e.g. autograder.zip)")
    parser.add_argument("--course", type=Path, default=COURSE_ROOT, help="the course root (default: this repository)")
    parser.add_argument("--labs", default=None, help="comma-separated labs to grade (default: every ready lab)")
    parser.add_argument("--test-timeout", type=float, default=None, help="seconds per test (default: the grader's)")
    parser.add_argument(
        "--lab-timeout",
        type=float,
        default=None,
        help="seconds per lab (default: the grader's; keep the sum under Gradescope's limit)",
    )
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="grade without bubblewrap if Gradescope's container does not allow it (graded code "
        "can then read the held-out tests)",
    )


def main(args: argparse.Namespace) -> int:
    labs = args.labs.split(",") if args.labs else None
    try:
        names = build_bundle(
            args.out,
            args.course,
            labs=labs,
            test_timeout=args.test_timeout,
            lab_timeout=args.lab_timeout,
            unsafe_no_sandbox=args.unsafe_no_sandbox,
        )
    except CourseError as error:
        print(f"grader gradescope-bundle: {error}", file=sys.stderr)
        return 2
    course_files = sum(name.startswith(f"{COURSE_DIR}/") for name in names)
    print(
        f"wrote {args.out}: setup.sh, run_autograder, {CONFIG_FILE} and the course ({course_files} files, "
        "held-out tests included, no solutions); upload it as the assignment's autograder"
    )
    return 0
