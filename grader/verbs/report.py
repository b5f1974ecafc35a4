"""The ``report`` verb: the instructor's class report from a graded folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.report.summary import CSV_FILE, HTML_FILE, JSON_FILE, write_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("graded_dir", type=Path, help="a folder written by `grader batch`")
    parser.add_argument("--out", type=Path, required=True, help="folder for class.csv, class.json, class.html")



def main(args: argparse.Namespace) -> int:
    try:
        summary = write_report(args.graded_dir, args.out)
    except FileNotFoundError as error:
        print(f"grader report: {error}", file=sys.stderr)
        return 2
    print(f"class report: {summary['students']} students, mean total {summary['total']['mean']} of "
          f"{summary['total']['max_score']}")
    for lab_id, lab in summary["labs"].items():
        print(f"  {lab_id}: mean {lab['mean']}/{lab['max_score']}, full marks {lab['full_marks']}, {lab['statuses']}")
    print(f"  flagged submissions: {len(summary['flagged'])}")
    print(f"wrote {args.out}/{CSV_FILE}, {JSON_FILE}, {HTML_FILE}")
    return 0
