"""What Gradescope runs: the Python side of the bundle's ``setup.sh`` and ``run_autograder``.

Gradescope's contract (one container per submission, built from the bundle):

- the bundle is unpacked into ``/autograder/source``; ``setup.sh`` runs once, as root, when the
  autograder image is built;
- for each submission, the student's files are in ``/autograder/submission`` and ``run_autograder``
  must leave ``/autograder/results/results.json`` (``score``, ``tests[]`` with ``name``, ``score``,
  ``max_score``, ``status``, ``output``, ``visibility``).

:func:`autograde` grades the submission with ``python -m grader run`` (in its own process, so that
even the grader's own crash is caught here), with the GPU hidden (Gradescope has none: GPU tests are
*pending*, shown with their points and graded on a GPU run) and the time limits the bundle was built
with, then copies the run's ``results.json`` into place. Whatever fails, a ``results.json`` is written
that says why. The root is ``/autograder`` unless ``--root`` says otherwise (the tests use a fake
tree in a temporary folder).

    python -m grader.runners.gradescope autograde [--root /autograder]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from grader.evidence.layout import GRADESCOPE_FILE
from grader.evidence.text import truncate_text

DEFAULT_ROOT = Path("/autograder")
#: The bundle's own files, relative to the root.
SOURCE_DIR = "source"
COURSE_DIR = "course"  # the pristine course, under source/
CONFIG_FILE = "bundle.json"  # grading options chosen when the bundle was built, under source/
SUBMISSION_DIR = "submission"
RESULTS_DIR = "results"
GRADED_DIR = "grader"  # the full graded folder (summary.json, feedback.md, raw reports), under results/
#: Gradescope's own folder names that never hold the course (``__MACOSX`` comes with Mac zips).
NOT_A_COURSE = {"__MACOSX", ".git"}


def course_root(root: Path) -> Path:
    return root / SOURCE_DIR / COURSE_DIR


def read_config(root: Path) -> dict:
    """The options written by ``gradescope-bundle`` (``gpu``, ``labs``, ``test_timeout``, ``lab_timeout``,
    ``unsafe_no_sandbox``)."""
    path = root / SOURCE_DIR / CONFIG_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def locate_course_copy(folder: Path, packages: list[str], depth: int = 3) -> Path:
    """The folder of ``folder`` (or below it) holding the student's lab packages.

    Students upload their course folder, a zip of it (Gradescope unpacks it, often one level down),
    or connect a repository: the lab packages may sit a few folders below the submission root.
    Without any lab package, ``folder`` itself is returned and the grader reports the missing files.
    """
    frontier = [folder]
    for _ in range(depth + 1):
        for candidate in frontier:
            if any((candidate / package).is_dir() for package in packages):
                return candidate
        frontier = [
            child
            for parent in frontier
            for child in sorted(parent.iterdir())
            if child.is_dir() and child.name not in NOT_A_COURSE and not child.is_symlink()
        ]
    return folder


def failure_results(reason: str) -> dict:
    """A Gradescope result for a submission the grader could not grade (0 points, the reason shown)."""
    return {
        "score": 0,
        "output": f"The autograder could not grade this submission: {reason}\n"
        "Please contact the course staff if this persists.",
        "stdout_visibility": "visible",
        "tests": [],
    }


def lab_packages(course: Path) -> list[str]:
    """Folder names of the course's lab packages (each holds a ``lab.toml``)."""
    return sorted(path.parent.name for path in course.glob("*/lab.toml"))


def autograde(root: Path, python: str = sys.executable) -> dict:
    """Grade ``root/submission`` into ``root/results/results.json``; return what was written."""
    results = root / RESULTS_DIR
    results.mkdir(parents=True, exist_ok=True)
    graded = results / GRADED_DIR
    course = course_root(root)
    config = read_config(root)
    submission = locate_course_copy(root / SUBMISSION_DIR, lab_packages(course))
    command = [
        python,
        "-m",
        "grader",
        "run",
        str(submission),
        "--out",
        str(graded),
        "--course",
        str(course),
        "--gpu",
        config.get("gpu", "off"),
    ]
    if config.get("labs"):
        command += ["--labs", ",".join(config["labs"])]
    for option in ("test_timeout", "lab_timeout"):
        if config.get(option):
            command += [f"--{option.replace('_', '-')}", str(config[option])]
    if config.get("unsafe_no_sandbox"):
        command.append("--unsafe-no-sandbox")
    print(f"grading {submission} with the course in {course}", flush=True)
    try:
        done = subprocess.run(
            command, cwd=course, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        print(done.stdout, flush=True)
        print(done.stderr, file=sys.stderr, flush=True)
        produced = graded / GRADESCOPE_FILE
        if produced.is_file():
            outcome = json.loads(produced.read_text(encoding="utf-8"))
        else:
            outcome = failure_results(
                f"the grader exited with code {done.returncode} without a result: "
                + truncate_text((done.stdout + done.stderr).strip(), 2000)
            )
    except (OSError, ValueError) as error:
        outcome = failure_results(f"{type(error).__name__}: {error}")
    (results / GRADESCOPE_FILE).write_text(json.dumps(outcome, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.runners.gradescope", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("autograde",))
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="Gradescope's folder (default /autograder)")
    args = parser.parse_args(argv)
    outcome = autograde(args.root)
    print(f"wrote {args.root / RESULTS_DIR / GRADESCOPE_FILE}: score {outcome.get('score')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
