"""A synthetic class for trying the instructor's tools: ``python -m grader.tests.synthetic_class OUT -n 60``.

Every student is a full copy of the demo course. Most students finished a random subset of the
functions (each function taken from the reference solution or left as the starter's stub, with a
per-student skill), and every fifth is one of the corpus fixtures (syntax error, segfault,
tampering, canary...), so the class report shows real spreads, statuses and flags::

    python -m grader.tests.synthetic_class graded/demo-class -n 60
    python -m grader batch graded/demo-class --out graded/demo -j 2 --course grader/tests/fixtures/course
    python -m grader report graded/demo --out results/demo-report
"""

from __future__ import annotations

import argparse
import random
import re
from pathlib import Path

from grader.tests.corpus import DEMO_COURSE, DEMO_PACKAGES, corpus_names, materialize, starter_copy

EDITABLE = {"labA": "arith.py", "labB": "text.py"}
FUNCTION = re.compile(r"^def (\w+)\(", re.MULTILINE)


def split_functions(source: str) -> tuple[str, dict[str, str]]:
    """(module header, function name -> its source) for a module of top-level functions."""
    starts = [match.start() for match in FUNCTION.finditer(source)]
    header = source[: starts[0]] if starts else source
    bodies = {}
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(source)
        bodies[FUNCTION.match(source, start).group(1)] = source[start:end].rstrip() + "\n\n\n"
    return header, bodies


def mixed_module(lab: str, rng: random.Random, skill: float) -> str:
    """The lab's editable module with each function solved with probability ``skill``."""
    package, name = DEMO_PACKAGES[lab], EDITABLE[lab]
    header, starter = split_functions((DEMO_COURSE / package / name).read_text())
    _, solution = split_functions((DEMO_COURSE / "solutions" / package / name).read_text())
    return header + "".join(solution[f] if rng.random() < skill else starter[f] for f in starter).rstrip() + "\n"


def make_class(dest: Path, size: int, seed: int = 0) -> list[str]:
    """Write ``size`` submissions into ``dest``; return their ids."""
    rng = random.Random(seed)
    fixtures = [name for name in corpus_names() if name not in ("lab_timeout",)]  # keep the class quick
    students = []
    for index in range(size):
        student = f"student{index + 1:03d}"
        if index % 5 == 4:
            materialize(fixtures[(index // 5) % len(fixtures)], dest / student)
        else:
            starter_copy(dest / student)
            skill = rng.uniform(0.0, 1.0)
            for lab, package in DEMO_PACKAGES.items():
                (dest / student / package / EDITABLE[lab]).write_text(mixed_module(lab, rng, skill))
        students.append(student)
    return students


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to create (one sub-folder per student)")
    parser.add_argument("-n", "--size", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"{args.out} is not empty")
    students = make_class(args.out, args.size, args.seed)
    print(f"wrote {len(students)} submissions into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
