"""An autograder zip for Gradescope, to grade a large class on its fleet (the ``gradescope-bundle`` verb).

    python -m grader gradescope-bundle --out autograder.zip [--labs lab01,lab02] [--lab-timeout 600]

Upload the zip as a Gradescope programming assignment's autograder (base image: Ubuntu). It holds:

- ``setup.sh``: run once by Gradescope, as root, when it builds the autograder image: installs Python,
  its headers and a C++ compiler when missing (the same script as the Docker image), creates
  ``/autograder/venv`` with the course's exact pins from ``pyproject.toml``, and collects the rubric;
- ``run_autograder``: run for every submission; :mod:`grader.runners.gradescope` grades
  ``/autograder/submission`` with the course's own grader and writes
  ``/autograder/results/results.json`` (Gradescope's format, from our scorer). Gradescope has no GPU:
  GPU tests are *pending*, listed with their points, to be graded on a GPU run;
- ``course/``: the course as students receive it (the ``release`` distribution: no solutions) *plus the
  labs' held-out tests*, which Gradescope runs like the visible ones and reports with their own
  visibility (``hidden``: never shown to students; ``after_due_date``: shown after the due date); and
  ``bundle.json`` with the options chosen here. Students never see the bundle.

Students submit their whole course folder (upload it, a zip of it, or a repository); only the files
each lab declares editable are graded, as everywhere else.
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path

from grader.course.labs import load_course
from grader.release.build import build_release
from grader.runners.gradescope import CONFIG_FILE, COURSE_DIR
from labkit.labspec import COURSE_ROOT

#: The system-package script the Docker image uses too (one list of what the OS must provide).
SYSTEM_PACKAGES_SCRIPT = COURSE_ROOT / "docker" / "install-system-packages.sh"
EXECUTABLE = 0o755

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image (the network is on).
set -euo pipefail
cd /autograder/source
sh ./install-system-packages.sh
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --disable-pip-version-check --no-cache-dir --upgrade pip
# The course's exact pins (pyproject.toml) and the course itself, with its grader.
/autograder/venv/bin/pip install --disable-pip-version-check --no-cache-dir --editable ./course
# `python -m grader` always means this grader, wherever it is started from (grader.pin).
/autograder/venv/bin/python -m grader.pin
# Collect the pristine rubric now (cached in the image), so each submission starts grading at once.
cd /autograder/source/course
/autograder/venv/bin/python -m grader.warm --course /autograder/source/course
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission: /autograder/submission -> /autograder/results/results.json.
# AUTOGRADER_ROOT and AUTOGRADER_PYTHON exist for testing the bundle outside Gradescope.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"
rm -f "$RESULTS"
cd "$ROOT/source/course" && "$PYTHON" -m grader.runners.gradescope autograde --root "$ROOT"
status=$?
# Gradescope's rule: a results file is always written, even when Python itself could not start.
if [ ! -s "$RESULTS" ]; then
    printf '{"score": 0, "output": "The autograder failed to start (exit %s); please contact the course staff.", "tests": []}\\n' \\
        "$status" > "$RESULTS"
fi
exit 0
"""  # noqa: E501 (the printf format above is one single-quoted shell word)


def _add_file(archive: zipfile.ZipFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
    info.external_attr = (0o100000 | mode) << 16  # a regular file with these permissions
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def build_bundle(
    out: Path,
    course_root: Path = COURSE_ROOT,
    *,
    labs: list[str] | None = None,
    test_timeout: float | None = None,
    lab_timeout: float | None = None,
    unsafe_no_sandbox: bool = False,
) -> list[str]:
    """Write the Gradescope autograder zip for the course at ``course_root``; return its file names.

    ``unsafe_no_sandbox``: grade without bubblewrap where Gradescope's container does not allow it
    (graded code can then read the held-out tests in its container).

    Raises:
        CourseError: for an unknown lab in ``labs``, or an ``out`` inside the course.
    """
    course = load_course(course_root)
    if labs:
        course.select(labs)  # fail now on an unknown lab, not on Gradescope
    config = {
        "gpu": "off",
        "labs": labs or [],
        "test_timeout": test_timeout,
        "lab_timeout": lab_timeout,
        "unsafe_no_sandbox": unsafe_no_sandbox,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    names = []
    with tempfile.TemporaryDirectory(prefix="gradescope-bundle-") as scratch, zipfile.ZipFile(out, "w") as archive:
        release = Path(scratch) / COURSE_DIR
        build_release(course, release, include_heldout=True)
        for path in sorted(release.rglob("*")):
            if path.is_file():
                name = f"{COURSE_DIR}/{path.relative_to(release).as_posix()}"
                _add_file(archive, name, path.read_bytes())
                names.append(name)
        _add_file(archive, "setup.sh", SETUP_SH.encode(), EXECUTABLE)
        _add_file(archive, "run_autograder", RUN_AUTOGRADER.encode(), EXECUTABLE)
        _add_file(archive, "install-system-packages.sh", SYSTEM_PACKAGES_SCRIPT.read_bytes(), EXECUTABLE)
        _add_file(archive, CONFIG_FILE, (json.dumps(config, indent=1) + "\n").encode())
        names += ["setup.sh", "run_autograder", "install-system-packages.sh", CONFIG_FILE]
    return names
