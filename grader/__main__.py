"""``python -m grader <verb>``: the command line, one module per verb.

Each verb module exposes ``add_arguments(parser)`` and ``main(args) -> exit code``; registering a
new verb is one line in :data:`VERBS`.

Before any verb runs, :func:`labkit.environment.require_course_environment` checks that this
interpreter is the course's environment (pinned torch, pytest-json-report, ...): run from another
Python, every lab would fail to import and look like the student's fault. Every path argument is made
absolute here, once, so a verb never depends on the working directory of a process it starts.

Exit status: 0 done; 1 the grader itself failed on some lab (``grader-error``: not the student's
fault, the output says what to do); 2 bad input or an unusable environment (nothing was graded).
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path

from labkit.environment import CourseEnvironmentError, require_course_environment

#: verb -> (module implementing it, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "run": ("grader.verbs.run", "grade one submission into a folder (summary.json, feedback, raw reports)"),
    "score": ("grader.verbs.score", "re-score a graded folder from its saved reports (no re-run)"),
    "batch": ("grader.verbs.batch", "grade a folder of submissions in parallel"),
    "report": ("grader.verbs.report", "the instructor's class report (CSV, HTML, JSON) from a batch folder"),
    "release": ("grader.verbs.release", "build and verify the student distribution (no solutions)"),
    "selfcheck": ("grader.verbs.selfcheck", "grade the reference solutions and the untouched starters"),
    "gradescope-bundle": ("grader.verbs.gradescope_bundle", "a Gradescope autograder zip (setup.sh, run_autograder)"),
    "slurm": ("grader.verbs.slurm", "grade a class on a Slurm cluster (submit, status, resubmit --failed)"),
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


def absolute_paths(args: argparse.Namespace) -> argparse.Namespace:
    """Every ``Path`` argument made absolute (``~`` expanded), whatever the verb."""
    for name, value in vars(args).items():
        if isinstance(value, Path):
            setattr(args, name, value.expanduser().resolve())
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:  # before the verbs are imported: they need pytest, rich, matplotlib
        require_course_environment(
            command=shlex.join(["-m", "grader", *argv]),
            nox_session="grade-me" if argv[:2] == ["run", "."] else None,
            check_versions=True,
        )
    except CourseEnvironmentError as error:
        print(f"python -m grader: {error}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    return args.handler(absolute_paths(args))


if __name__ == "__main__":
    sys.exit(main())
