"""A busy machine on demand: CPU hogs beside the grader, as on a shared node (a class graded beside a test run).

    with cpu_hogs(per_core=3):
        ...grade...

Each hog is a Python process spinning until a deadline of its own (so none outlives a crashed test run
by long), and all are stopped by pid when the block ends. ``python -m grader.tests.load SECONDS`` runs the
same hogs from a shell.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@contextmanager
def cpu_hogs(per_core: int = 3, seconds: float = 1800.0) -> Iterator[list[subprocess.Popen]]:
    """``per_core`` spinning processes per core for at most ``seconds``; stopped by pid when the block ends."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)], stdin=subprocess.DEVNULL)
        for _ in range(per_core * cores())
    ]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


if __name__ == "__main__":
    with cpu_hogs(seconds=float(sys.argv[1]) if len(sys.argv) > 1 else 600.0):
        time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 600.0)
