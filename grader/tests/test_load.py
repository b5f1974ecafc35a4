"""Grading is fair on a busy machine: limits measure the submission, not the node.

Three CPU hogs per core run beside the grader (each ending by itself, all stopped by pid), and the
grading runs at a lower priority than the hogs (``nice``), as a class graded on a node shared with
other jobs: its wall clock runs about fifteen times slower than on an idle machine. The reference must
still earn every point with the default limits, and a hang must still fail alone, within its limit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.course.labs import load_course, make_reference_submission
from grader.evidence.layout import SUMMARY_FILE
from grader.execute.command import pytest_env
from grader.tests.conftest import NO_BUBBLEWRAP, needs_bubblewrap
from grader.tests.corpus import DEMO_COURSE, expected, materialize
from grader.tests.load import cpu_hogs

#: The grader's niceness beside the hogs (nice 0): about a fifteenth of each core is left for it
#: (scheduler weights 215 against 3 x 1024).
GRADER_NICENESS = 7
pytestmark = pytest.mark.skipif(shutil.which("nice") is None, reason="needs nice(1)")


def grade_under_load(submission: Path, out: Path, *args: str) -> tuple[dict, float]:
    command = [
        "nice",
        "-n",
        str(GRADER_NICENESS),
        sys.executable,
        "-m",
        "grader",
        "run",
        str(submission),
        "--out",
        str(out),
        *args,
        *(["--unsafe-no-sandbox"] if NO_BUBBLEWRAP else []),
    ]
    start = time.monotonic()
    with cpu_hogs(per_core=3, seconds=3600):
        done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    assert (out / SUMMARY_FILE).is_file(), done.stdout + done.stderr
    return json.loads((out / SUMMARY_FILE).read_text()), time.monotonic() - start


@needs_bubblewrap
def test_the_reference_earns_every_point_of_lab01_on_a_busy_machine(tmp_path):
    course = load_course()
    if not course.solutions.is_dir():
        pytest.skip("the reference solutions are not in this copy of the course")
    reference = make_reference_submission(course, tmp_path / "reference")
    summary, wall = grade_under_load(reference, tmp_path / "graded", "--labs", "lab01")
    lab = summary["labs"]["lab01"]
    lost = [(t["nodeid"], t["outcome"], t["message"][:200]) for t in lab["tests"] if t["outcome"] != "passed"]
    assert (lab["score"], lab["status"]) == (lab["max_score"], "graded"), f"after {wall:.0f} s: {lost}"


#: Two threads of convolutions, the kind of work lab 1's tests do; prints the CPU seconds it took.
TWO_THREADS_OF_CONVOLUTIONS = """
import resource, torch
from torch import nn
torch.set_num_threads(2)
model = nn.Sequential(*[nn.Conv2d(32, 32, 3, padding=1) for _ in range(8)]).eval()
x = torch.randn(2, 32, 56, 56)
with torch.no_grad():
    model(x)
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(5):
        model(x)
    after = resource.getrusage(resource.RUSAGE_SELF)
print(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
"""


def cpu_seconds_of_convolutions(env: dict[str, str]) -> float:
    command = ["nice", "-n", str(GRADER_NICENESS), sys.executable, "-c", TWO_THREADS_OF_CONVOLUTIONS]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=True)
    return float(done.stdout.split()[-1])


def test_waiting_threads_cost_a_graded_process_no_cpu_time_on_a_busy_machine(tmp_path):
    """OpenMP threads that spin while a sibling is descheduled would bill the node's load to the submission."""
    env = pytest_env(tmp_path, "off", threads=2)
    idle = cpu_seconds_of_convolutions(env)
    with cpu_hogs(per_core=3, seconds=600):
        busy = cpu_seconds_of_convolutions(env)
    assert busy < 3 * idle + 0.5, f"{busy:.2f} s of CPU beside the hogs against {idle:.2f} s on an idle machine"


def test_a_hang_still_fails_alone_within_its_limit_on_a_busy_machine(rubric_cache, tmp_path):
    submission = materialize("hangs_in_one_function", tmp_path / "hangs")
    summary, wall = grade_under_load(
        submission,
        tmp_path / "graded",
        "--course",
        str(DEMO_COURSE),
        "--labs",
        "labA",
        "--cache-dir",
        str(rubric_cache),
    )
    lab, want = summary["labs"]["labA"], expected("hangs_in_one_function")["labs"]["labA"]
    outcomes = {t["name"]: t["outcome"] for t in lab["tests"]}
    assert lab["status"] == "graded", lab["reason"]
    assert {name: outcomes[name] for name in want["outcomes"]} == want["outcomes"], "each hang fails alone"
    assert lab["score"] == want["score"] + want["heldout"], "every other test is graded"
    # 3 hanging tests, each stopped at 10 s of CPU or its 50 s wall-clock backstop, whichever comes first
    assert wall < 420, f"the hangs ended within their limits ({wall:.0f} s)"
