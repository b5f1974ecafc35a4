"""A class of the demo course for trying the instructor's tools: ``python -m grader.synthetic OUT -n 60``.

Every student is a full copy of the demo course. Most students finished a random subset of the
functions (each function taken from the reference solution or left as the starter's stub, with a
per-student skill), and every fifth is one of the corpus's submissions (syntax error, segfault,
tampering, canary...), so the class report shows real spreads, statuses and flags::

    python -m grader.synthetic graded/demo-class -n 60
    python -m grader batch graded/demo-class --out graded/demo -j 2 --course grader/tests/fixtures/course
    python -m grader report graded/demo --out results/demo-report --course grader/tests/fixtures/course
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.synthetic.classes import write_demo_class


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to create (one sub-folder per student)")
    parser.add_argument("-n", "--size", type=int, default=60, help="how many students (default 60)")
    parser.add_argument("--seed", type=int, default=0, help="one seed, one class (default 0)")
    args = parser.parse_args(argv)
    if args.size < 1:
        parser.error("--size must be at least 1")
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        parser.error(f"{args.out} is not empty")
    students = write_demo_class(args.out, args.size, args.seed)
    print(f"wrote {len(students)} submissions of the demo course into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
