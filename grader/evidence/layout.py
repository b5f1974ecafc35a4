"""The layout of a graded submission's folder: its file names, and small readers and writers.

::

    OUT/
      summary.json          the scored result (grader.scoring.results.SubmissionResult)
      feedback.md           the student's feedback
      results.json          Gradescope's format
      rubric.json           the rubric this submission was scored against
      submission.json       what the sandbox took and what it flagged (tampering, missing files)
      raw/<lab>/run.json    how the lab's visible tests' processes ended (grader.execute.supervisor.RunRecord)
      raw/<lab>/limits.json every test's time limit and how it was derived (grader.execute.limits)
      raw/<lab>/events.jsonl the supervisor's checked record of the probe's events (grader.evidence.events)
      raw/<lab>/report.json  pytest-json-report's report (report.1.json... after a resume), output.txt
      raw/<lab>/heldout/    the same files for the lab's held-out tests (their own process)
      submitted/<package>/<file>  the editable files the sandbox took, as graded (the class report's
                            similarity check compares them; scoring never reads them)

Everything :mod:`grader.scoring.score` needs is in ``rubric.json``, ``submission.json`` and ``raw/``: a regrade
(new scoring rules, a fixed rubric) reads these files and never runs a student's code again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from grader.evidence.untrusted import parse_untrusted_json

SUMMARY_FILE = "summary.json"
FEEDBACK_FILE = "feedback.md"
GRADESCOPE_FILE = "results.json"
RUBRIC_FILE = "rubric.json"
SUBMISSION_FILE = "submission.json"
RAW_DIR = "raw"
#: Inside ``raw/<lab>/``: the held-out tests' part of the run, with the same files.
HELDOUT_RUN_DIR = "heldout"
RUN_FILE = "run.json"
LIMITS_FILE = "limits.json"
EVENTS_FILE = "events.jsonl"
REPORT_FILE = "report.json"
OUTPUT_FILE = "output.txt"
SUBMITTED_DIR = "submitted"


def report_file(process: int) -> str:
    """The JSON report's file name of the lab's ``process``-th pytest process (0: the first)."""
    return REPORT_FILE if process == 0 else REPORT_FILE.replace(".json", f".{process}.json")


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None when the file is missing, torn, nested absurdly deep or not an
    object. Some of these files hold what graded code wrote (``report.json``): reading them never raises."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    value, _problem = parse_untrusted_json(data)
    return value if isinstance(value, dict) else None


def write_submission_meta(out: Path, meta: dict[str, Any]) -> None:
    """Write ``out/submission.json``: who was graded, the GPU mode, flags, notes, why labs did not run."""
    (out / SUBMISSION_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def keep_submitted(sandbox: Path, taken: list[str], out: Path) -> None:
    """Copy the editable files the sandbox took (``taken``: paths relative to it) into ``out/submitted/``."""
    for rel in taken:
        target = out / SUBMITTED_DIR / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sandbox / rel, target)
