"""Time budgets: how long each test and each lab may run, derived from the reference solution's own times.

A fixed limit for every test (say 300 s) is either far too long for a test the reference finishes in
0.2 s, so a hanging submission costs the instructor hours, or too short for a test that compiles a
model. So each test gets a limit from what the **reference** needs on it (recorded in each lab's
``reference_times.json``, see :mod:`grader.course.reference_times`, and carried by the rubric)::

    test limit = max(min_test_timeout_s, time_factor x the reference's time on that test)
    lab budget = sum of the lab's test limits + start-up allowance

The start-up allowance covers what happens outside any test (starting Python, importing torch,
collecting): ``time_factor`` x the reference's own start-up, at least ``min_startup_s``. A test the
reference was never timed on (a new test, or a GPU test timed on a machine without one) gets
``unmeasured_test_timeout_s``. ``--test-timeout`` / ``--lab-timeout`` replace the derived values.

Because the lab budget is the sum of its tests' limits, a submission whose every test stays within its
own limit is never stopped by the lab budget, however slow: a correct but slow submission is not
punished. What bounds a submission where *everything* hangs is the streak rule: after
``max_consecutive_timeouts`` tests in a row ran out of time, the rest of the lab is not run and the lab's
status says so (``stopped``). Its default is generous on purpose: lab 1 runs 13 tests in a row that all
call ``fuse_conv_bn``, and one hanging function must cost only its own tests, not the whole lab.

Everything here is a pure function of the rubric and the limits: the supervisor
(:mod:`grader.execute.supervisor`), the in-process timer (:mod:`grader.execute.probe`) and the scorer all read the
same numbers, and ``raw/<lab>/limits.json`` records them for every graded run.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the rubric imports the runner, which imports this module
    from grader.course.rubric import LabRubric, Rubric
    from grader.execute.limits import RunLimits


@dataclass(frozen=True)
class RunLimits:
    """Time and size limits of one lab's run (the time limits per test and per lab: :mod:`grader.execute.limits`).

    Attributes:
        test_timeout_s: one limit for every test (``--test-timeout``); None: from the reference's times.
        lab_timeout_s: the lab's wall-clock budget (``--lab-timeout``); None: the sum of its test limits
            plus a start-up allowance.
        time_factor: a test's limit is this many times the reference solution's time on it...
        min_test_timeout_s: ...but never less than this.
        unmeasured_test_timeout_s: the limit of a test the reference was never timed on.
        min_startup_s: the least start-up allowance (Python, imports, collection) in a lab budget.
        max_consecutive_timeouts: tests in a row that may run out of time before the lab is stopped.
        output_cap_bytes: console output beyond this kills the run (a flood, not a test).
        output_keep_bytes: console output kept after the run (head and tail halves).
        report_cap_bytes: a JSON report larger than this is rewritten with long strings shortened.
    """

    test_timeout_s: float | None = None
    lab_timeout_s: float | None = None
    time_factor: float = 10.0
    min_test_timeout_s: float = 10.0
    unmeasured_test_timeout_s: float = 300.0
    min_startup_s: float = 60.0
    max_consecutive_timeouts: int = 15
    output_cap_bytes: int = 64 * 1024 * 1024
    output_keep_bytes: int = 64 * 1024
    report_cap_bytes: int = 4 * 1024 * 1024


@dataclass(frozen=True)
class LabBudget:
    """The time limits of one lab's run.

    Attributes:
        tests: node id -> (limit in seconds, how it was derived, in words).
        default_test_s: the limit of a test missing from ``tests`` (the grader's canaries).
        lab_s: the whole lab's wall-clock budget (all its pytest processes together).
        max_consecutive_timeouts: tests in a row that may run out of time before the lab is stopped
            (0: never stopped).
    """

    tests: dict[str, tuple[float, str]]
    default_test_s: float
    lab_s: float
    max_consecutive_timeouts: int

    def limit(self, nodeid: str) -> float:
        return self.tests.get(nodeid, (self.default_test_s, ""))[0]

    def stops_at(self, streak: int) -> bool:
        """Whether ``streak`` tests in a row out of time stop the lab (never when the limit is 0)."""
        return 0 < self.max_consecutive_timeouts <= streak

    def to_dict(self) -> dict[str, Any]:
        """The form written to ``raw/<lab>/limits.json`` and read by the probe plugin."""
        return {"lab_s": self.lab_s, "default_test_s": self.default_test_s,
                "max_consecutive_timeouts": self.max_consecutive_timeouts,
                "tests": {nodeid: {"limit_s": limit, "basis": basis} for nodeid, (limit, basis) in self.tests.items()}}


def _seconds(value: float) -> str:
    if value < 0.001:
        return "under 1 ms"
    return f"{value:.2g} s" if value < 10 else f"{value:.0f} s"


def limit_for_test(reference_s: float | None, limits: RunLimits) -> tuple[float, str]:
    """One test's limit and its derivation in words."""
    if limits.test_timeout_s is not None:
        return float(limits.test_timeout_s), "set with --test-timeout"
    if reference_s is None:
        return float(limits.unmeasured_test_timeout_s), "the reference solution was never timed on this test"
    scaled = limits.time_factor * reference_s
    if scaled <= limits.min_test_timeout_s:
        return float(limits.min_test_timeout_s), (f"the minimum per-test limit; the reference solution takes "
                                                  f"{_seconds(reference_s)}")
    return round(scaled, 1), f"{limits.time_factor:g} x the reference solution's {_seconds(reference_s)}"


def lab_budget(lab: LabRubric, limits: RunLimits, *, heldout: bool = False) -> LabBudget:
    """The limits of one part of ``lab``'s run: its visible tests, or (``heldout``) its held-out ones.

    Each part is its own pytest process (or a few, after a killed test) with its own start-up
    allowance; the reference's recorded start-up (its whole run minus its tests) is counted once per part.
    """
    tests = {test.nodeid: limit_for_test(test.reference_s, limits) for test in lab.tests if test.heldout == heldout}
    if limits.lab_timeout_s is not None:
        lab_s = float(limits.lab_timeout_s)
    else:
        measured = [test.reference_s for test in lab.tests if test.reference_s is not None]
        startup = 0.0
        if lab.reference_wall_s is not None:
            startup = limits.time_factor * max(0.0, lab.reference_wall_s - sum(measured))
        lab_s = round(sum(limit for limit, _ in tests.values()) + max(limits.min_startup_s, startup), 1)
    default = float(limits.test_timeout_s if limits.test_timeout_s is not None else limits.min_test_timeout_s)
    return LabBudget(tests, default, lab_s, limits.max_consecutive_timeouts)


def whole_lab_s(lab: LabRubric, limits: RunLimits) -> float:
    """The longest an honest grading of ``lab`` can take: its visible part, then its held-out part (if any)."""
    parts = [False, True] if lab.heldout_tests else [False]
    return sum(lab_budget(lab, limits, heldout=part).lab_s for part in parts)


#: What a process grading whole submissions (a container, a Slurm task) gets beyond the labs' budgets:
#: start-up, the sandbox, scoring and writing the reports.
GRADING_MARGIN_S = 600.0


def submission_budget_s(rubric: Rubric, limits: RunLimits, labs: Collection[str] | None = None) -> float:
    """The sum of one submission's lab budgets (of ``labs`` only, if given): the longest an honest grading can take."""
    return sum(whole_lab_s(lab, limits) for lab in rubric.labs
               if lab.error is None and (labs is None or lab.lab in labs))


def time_limit_args(limits: RunLimits) -> list[str]:
    """The ``grader run`` options that give another process (a container, a Slurm task) these limits."""
    args = ["--time-factor", f"{limits.time_factor:g}", "--min-test-timeout", f"{limits.min_test_timeout_s:g}",
            "--max-consecutive-timeouts", str(limits.max_consecutive_timeouts)]
    if limits.test_timeout_s is not None:
        args += ["--test-timeout", f"{limits.test_timeout_s:g}"]
    if limits.lab_timeout_s is not None:
        args += ["--lab-timeout", f"{limits.lab_timeout_s:g}"]
    return args
