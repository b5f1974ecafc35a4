"""The ``score`` verb: re-score a graded folder from its saved reports (no student code runs)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grader.evidence.layout import SUMMARY_FILE
from grader.scoring.results import SubmissionResult
from grader.scoring.score import rescore

FORMATS = ("md", "json", "gradescope")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "reports_dir", type=Path, help="a folder written by `grader run` (or one student's batch folder)"
    )
    parser.add_argument("--format", choices=FORMATS, default="md", help="what to print (default: md)")
    parser.add_argument("--write", action="store_true", help=f"also rewrite {SUMMARY_FILE} and the feedback files")


def main(args: argparse.Namespace) -> int:
    from grader.scoring.feedback import render, write_outputs

    try:
        result = rescore(args.reports_dir)
    except (FileNotFoundError, ValueError) as error:
        print(f"grader score: {error}", file=sys.stderr)
        return 2
    if args.write:
        write_outputs(result, args.reports_dir)
    text = render(result, args.format)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def dumps(result: SubmissionResult) -> str:
    return json.dumps(result.to_dict(), indent=1) + "\n"
