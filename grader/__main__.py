"""``python -m grader <verb>``: the command line, one module per verb.

Each verb module exposes ``add_arguments(parser)`` and ``main(args) -> exit code``; registering a
new verb is one line in :data:`VERBS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: verb -> (module implementing it, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "run": ("grader.run", "grade one submission into a folder (summary.json, feedback, raw reports)"),
    "score": ("grader.score", "re-score a graded folder from its saved reports (no re-run)"),
    "batch": ("grader.batch", "grade a folder of submissions in parallel"),
    "report": ("grader.report", "the instructor's class report (CSV, HTML, JSON) from a batch folder"),
    "release": ("grader.release", "build and verify the student distribution (no solutions)"),
    "selfcheck": ("grader.selfcheck", "grade the reference solutions and the untouched starters"),
    "gradescope-bundle": ("grader.gradescope_bundle", "a Gradescope autograder zip (setup.sh, run_autograder)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grader", description="The course autograder.")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, (module_name, help_text) in VERBS.items():
        module = importlib.import_module(module_name)
        sub = verbs.add_parser(verb, help=help_text, description=(module.__doc__ or help_text).strip().splitlines()[0])
        module.add_arguments(sub)
        sub.set_defaults(handler=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
