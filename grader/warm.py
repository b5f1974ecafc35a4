"""Collect the pristine rubric into the grader's cache ahead of time.

    python -m grader.warm [--course ROOT]

Every ``grader run`` needs the rubric (each test's points, from a ``pytest --collect-only`` of the
pristine course: seconds per lab, mostly importing PyTorch). A fresh container starts with an empty
cache, so the course image (``Dockerfile``) and the Gradescope bundle (``setup.sh``) collect it once
while they are built; each graded submission then starts on its tests at once. The cache is keyed on
the pristine files, so a changed course is simply collected again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.course.labs import load_course
from grader.execute.collect import DEFAULT_CACHE_DIR, build_rubric
from labkit.labspec import COURSE_ROOT


def warm_rubric(course_root: Path = COURSE_ROOT, cache_dir: Path = DEFAULT_CACHE_DIR) -> int:
    """Collect the rubric of every ready lab of the course into ``cache_dir``; return the labs collected."""
    course = load_course(course_root)
    for package, why in course.not_ready.items():
        print(f"  {package}: not ready ({why})")
    rubric = build_rubric(course, list(course.labs), cache_dir)
    for lab in rubric.labs:
        extension = (
            f" (and an optional extension: {lab.extension_tests} tests, {lab.extension_points} points)"
            if lab.extension_tests
            else ""
        )
        print(
            f"  {lab.lab}: "
            + (
                f"{len(lab.main_tests)} tests, {lab.max_score} points{extension}"
                if lab.error is None
                else f"UNAVAILABLE: {lab.error.splitlines()[0]}"
            )
        )
    return len(rubric.labs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.warm", description=__doc__.splitlines()[0])
    parser.add_argument("--course", type=Path, default=COURSE_ROOT, help="the course root (default: this course)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="the rubric cache")
    args = parser.parse_args(argv)
    print(f"collecting the pristine rubric of {args.course} into {args.cache_dir}")
    warm_rubric(args.course, args.cache_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
