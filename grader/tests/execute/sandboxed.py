"""Run a few lines of Python under the grader's isolation, outside any grading (for the isolation's own tests)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grader.execute.bwrap import BwrapProgram
from grader.execute.isolation import Bubblewrap, View


def run_isolated(code: str, program: BwrapProgram | None = None) -> subprocess.CompletedProcess:
    """``python -c code`` in a sandbox that sees no course (``program``: the bubblewrap that isolates it,
    default the grader's choice), as the user graded code runs as; its output as text.

    Raises:
        subprocess.CalledProcessError: the sandbox or the code failed.
    """
    launch = Bubblewrap(sys.executable, Path("/nonexistent-course"), program).command(
        [sys.executable, "-c", code], {"PATH": "/usr/bin"}, View((), (), (), Path("/"))
    )
    return launch.run(capture_output=True, text=True, timeout=60, check=True)
