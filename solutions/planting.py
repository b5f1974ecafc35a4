"""Plant a mistake in a lab's reference solution and run the lab's tests on it.

A graded test proves something only if it fails for the mistake it is meant to catch. A planted
course is a copy of one lab whose editable files are the reference's, with one edit (the mistake)
applied; :func:`run_planted` runs that copy's ``test_lab.py`` in a fresh process, as a student's
``nox -s labNN`` would (the copy is imported instead of the course's own package).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from labkit.impl import IMPL_ENV_VAR
from labkit.labspec import COURSE_ROOT, HELDOUT_DIR, TEST_FILE, load_lab_spec


@dataclass(frozen=True)
class Mistake:
    """One edit of a reference file: ``old`` (which must occur) replaced by ``new``."""

    file: str
    old: str
    new: str


def planted_course(package: str, root: Path, *mistakes: Mistake) -> Path:
    """``root``: the lab ``package`` (tests, harness files) with the reference's editable files and ``mistakes``."""
    spec = load_lab_spec(package)
    lab = root / package
    shutil.copytree(spec.directory, lab, ignore=shutil.ignore_patterns("__pycache__", HELDOUT_DIR))
    for name in spec.editable:
        shutil.copy2(COURSE_ROOT / "solutions" / package / name, lab / name)
    for mistake in mistakes:
        path = lab / mistake.file
        text = path.read_text(encoding="utf-8")
        assert mistake.old in text, (
            f"the mistake cannot be planted: {mistake.old!r} is not in the reference's {mistake.file}"
        )
        path.write_text(text.replace(mistake.old, mistake.new), encoding="utf-8")
    shutil.copy2(COURSE_ROOT / "conftest.py", root / "conftest.py")
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # the copy is the rootdir: its conftest loads
    return root


@dataclass(frozen=True)
class PlantedRun:
    """What the lab's tests said about a planted course."""

    output: str  # pytest's stdout and stderr
    failed: dict[str, str]  # test id (``test_x[case]``) -> its failure message
    passed: list[str]


def run_planted(root: Path, package: str, *pytest_args: str, timeout: float = 900) -> PlantedRun:
    """``python -m pytest <package>/test_lab.py *pytest_args`` in the planted course (the student's package)."""
    env = {key: value for key, value in os.environ.items() if key not in (IMPL_ENV_VAR, "TRITON_INTERPRET")}
    report = root / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", f"{package}/{TEST_FILE}", "-p", "no:cacheprovider", "-q", "--tb=short",
         "--json-report", f"--json-report-file={report}", *pytest_args],
        cwd=root, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert report.is_file(), f"pytest wrote no report (exit {done.returncode}):\n{output[-3000:]}"
    tests = json.loads(report.read_text(encoding="utf-8"))["tests"]
    name = lambda test: test["nodeid"].split("::")[-1]  # noqa: E731
    failed = {name(t): _message(t) for t in tests if t["outcome"] == "failed"}
    return PlantedRun(output, failed, [name(t) for t in tests if t["outcome"] == "passed"])


def _message(test: dict) -> str:
    for phase in ("setup", "call", "teardown"):
        crash = test.get(phase, {}).get("crash")
        if crash:
            return crash["message"]
    return ""
