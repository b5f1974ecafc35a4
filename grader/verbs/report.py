"""The ``report`` verb: the instructor's class report from a graded folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.course.labs import CourseError, load_course
from grader.report.gradebook import RosterError, read_roster
from grader.report.similarity import Thresholds
from grader.report.summary import CSV_FILE, HTML_FILE, JSON_FILE, write_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("graded_dir", type=Path, help="a folder written by `grader batch`")
    parser.add_argument("--out", type=Path, required=True, help="folder for class.csv, class.json, class.html")
    parser.add_argument(
        "--course",
        type=Path,
        default=None,
        help="the course the class was graded against: its starter code is set aside by the "
        "similarity check (default: this repository)",
    )
    parser.add_argument(
        "--roster",
        type=Path,
        default=None,
        help="roster.csv mapping submission folders to students (columns Submission, Student, and "
        "optionally ID, SIS User ID, SIS Login ID, Section): writes gradebook.csv for Canvas "
        "and gradebook-moodle.csv",
    )
    parser.add_argument(
        "--assignment",
        action="append",
        default=[],
        metavar="LAB=NAME",
        help="the gradebook column of a lab, e.g. 'lab01=Lab 1 (4521)' to match Canvas assignment "
        "4521 (default: '<lab id> <title>'); repeat for each lab",
    )
    defaults = Thresholds()
    parser.add_argument(
        "--similarity",
        type=float,
        default=defaults.similarity,
        help=f"flag a pair when this share of their code is found in the other's (default {defaults.similarity})",
    )
    parser.add_argument(
        "--min-shared",
        type=int,
        default=defaults.min_overlap,
        help=f"and they share at least this many normalised characters (default {defaults.min_overlap})",
    )


def _assignments(entries: list[str]) -> dict[str, str]:
    names = {}
    for entry in entries:
        lab, equals, name = entry.partition("=")
        if not equals or not lab.strip() or not name.strip():
            raise RosterError(f"--assignment {entry!r}: write LAB=NAME, e.g. 'lab01=Lab 1 (4521)'")
        names[lab.strip()] = name.strip()
    return names


def main(args: argparse.Namespace) -> int:
    try:
        course = load_course(args.course) if args.course else None
        roster = read_roster(args.roster) if args.roster else None
        thresholds = Thresholds(similarity=args.similarity, min_overlap=args.min_shared)
        summary = write_report(
            args.graded_dir,
            args.out,
            course=course,
            roster=roster,
            assignments=_assignments(args.assignment),
            thresholds=thresholds,
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except (FileNotFoundError, CourseError, RosterError) as error:
        print(f"grader report: {error}", file=sys.stderr)
        return 2
    print(
        f"class report: {summary['students']} students, mean total {summary['total']['mean']} of "
        f"{summary['total']['max_score']}"
    )
    for lab_id, lab in summary["labs"].items():
        print(f"  {lab_id}: mean {lab['mean']}/{lab['max_score']}, full marks {lab['full_marks']}, {lab['statuses']}")
    print(f"  flagged submissions: {len(summary['flagged'])}")
    print_similarity(summary["similarity"])
    print_gradebook(summary["gradebook"])
    print(f"wrote {args.out}/{CSV_FILE}, {JSON_FILE}, {HTML_FILE}")
    return 0


def print_similarity(similarity: dict) -> None:
    if similarity["empty"]:
        print(f"  similar submissions: none compared: {similarity['empty']}")
        return
    limits = similarity["thresholds"]
    print(
        f"  similar submissions ({similarity['detector']}; flagged at {limits['similarity']:.0%} shared, "
        f"at least {limits['min_overlap']} normalised characters):"
    )
    for lab_id, lab in similarity["labs"].items():
        if "skipped" in lab:
            print(f"    {lab_id}: not compared: {lab['skipped']}")
            continue
        top = lab["highest_unflagged"]
        print(
            f"    {lab_id}: {len(lab['compared'])} students compared, pairs flagged: {len(lab['flagged'])}"
            + (f"; highest pair not flagged {top['score']:.0%}" if top else "")
        )
        for pair in lab["flagged"]:
            print(f"      {' ~ '.join(pair['students'])}: {pair['score']:.0%} ({pair['page']})")


def print_gradebook(book: dict, shown: int = 10) -> None:
    """Where the gradebook went and who it could not treat as usual (the first ``shown`` of each list)."""
    if not book["written"]:
        print(f"  gradebook: {book['hint']}")
        return
    print(f"  gradebook: {book['written']} ({book['rows']} students)")
    for key in ("not_in_roster", "not_in_class", "left_blank", "pending_gpu", "not_in_moodle"):
        for entry in book[key][:shown]:
            print(f"    {key.replace('_', ' ')}: {entry['student']}: {entry['why']}")
        if len(book[key]) > shown:
            print(f"    {key.replace('_', ' ')}: and {len(book[key]) - shown} more (class.html lists them all)")
