"""The fixture corpus: whole submissions (good, partial, broken, malicious) graded against the demo course.

Each folder under ``fixtures/submissions/`` holds the files a student changed plus ``expected.json``:
what the grader must conclude (per lab, ``score`` is the points of the visible tests and ``heldout``
those of the held-out tests, 0 when absent). :func:`materialize` turns one into a full student copy of the course:
the demo course's starter, the reference solution of the labs listed in ``base_solutions``, then the
folder's own files on top (``"bare": true`` skips the starter copy: the submission is only those files).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from labkit.labspec import HELDOUT_DIR

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEMO_COURSE = FIXTURES / "course"
#: The demo course's lab packages: what tells its root folder from a folder wrapped around it.
DEMO_NAMES = frozenset({"labA_arith", "labB_text"})
SUBMISSIONS = FIXTURES / "submissions"
EXPECTED_FILE = "expected.json"
DEMO_PACKAGES = {"labA": "labA_arith", "labB": "labB_text"}


def corpus_names() -> list[str]:
    return sorted(path.name for path in SUBMISSIONS.iterdir() if (path / EXPECTED_FILE).is_file())


def expected(name: str) -> dict:
    return json.loads((SUBMISSIONS / name / EXPECTED_FILE).read_text(encoding="utf-8"))


def starter_copy(dest: Path) -> Path:
    """The demo course as a student receives it (no solutions, no held-out tests)."""
    shutil.copytree(DEMO_COURSE, dest, ignore=shutil.ignore_patterns("solutions", HELDOUT_DIR, "__pycache__"))
    return dest


def materialize(name: str, dest: Path) -> Path:
    """Build the full submission ``name`` in ``dest`` (see the module docstring)."""
    spec = expected(name)
    if spec.get("bare"):
        dest.mkdir(parents=True)
    else:
        starter_copy(dest)
    for lab in spec.get("base_solutions", []):
        package = DEMO_PACKAGES[lab]
        for source in (DEMO_COURSE / "solutions" / package).glob("*.py"):
            if source.name != "__init__.py":
                shutil.copy2(source, dest / package / source.name)
    shutil.copytree(
        SUBMISSIONS / name, dest, ignore=shutil.ignore_patterns(EXPECTED_FILE, "__pycache__"), dirs_exist_ok=True
    )
    return dest
