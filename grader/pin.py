"""Pin ``python -m grader`` to the installed grader: ``python -m grader.pin`` (run once per environment).

``python -m grader`` puts the working directory first on ``sys.path``. Run from inside a student's
copy of the course (which ships ``grader/`` and ``labkit/``), it would import *that copy*: a
submission could then grade itself and print any score, or have the real grader grade it against its
own edited tests. This module writes a ``.pth`` file into the environment's ``site-packages`` that
imports ``grader`` and ``labkit`` while Python starts, before the working directory is put on
``sys.path``, so every later ``import grader`` (and ``-m grader``) finds the installed ones. In a graded
process ``PYTHONPATH`` (the sandbox) still comes first, as it must.

The course's environments write it when they are made: ``nox`` (``.nox/course-env``), the Docker image
and the Gradescope bundle's ``setup.sh``. :func:`grader.runners.local.own_grader_problem` refuses a
grading that an interpreter without the pin got wrong.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

PIN_FILE = "course-grader-pin.pth"
#: One line: a .pth line starting with ``import`` is executed at start-up; a failure must not stop Python.
PIN_LINE = 'import sys; exec("try:\\n import grader, labkit\\nexcept Exception:\\n pass")\n'


def write_pin(site_packages: Path | None = None) -> Path:
    """Write the pin into ``site_packages`` (default: this interpreter's) and return its path."""
    folder = Path(site_packages or sysconfig.get_paths()["purelib"])
    path = folder / PIN_FILE
    path.write_text(PIN_LINE, encoding="utf-8")
    return path


def main() -> int:
    print(f"pinned python -m grader to the installed grader: {write_pin()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
