"""Time limits: how long each test and each lab part may run, derived from the reference solution's times.

A fixed limit for every test (say 300 s) is either far too long for a test the reference finishes in
0.2 s, so a hanging submission costs the instructor hours, or too short for a test that compiles a
model. So each test gets a limit from what the **reference** needs on it (recorded in each lab's
``reference_times.json``, see :mod:`grader.course.reference_times`, and carried by the rubric).

The limit is counted in **CPU seconds** of the test's process, not in seconds of the wall clock: a
busy machine (a class graded beside a test run, a node shared with other jobs) slows a test's wall
clock several times over, but not the CPU time it needs, so a correct submission never loses a point
because the node was busy. A test that spins (the usual hang) burns CPU and is stopped at its CPU
limit; one that sleeps or deadlocks burns none, and is stopped by a generous wall-clock backstop::

    test CPU limit   = max(min_test_timeout_s, time_factor x the reference's CPU time on that test)
    test wall limit  = wall_factor x its CPU limit                       (the backstop)
    part budget      = sum of the part's wall limits + the full canaries' allowance + start-up allowance

The reference is timed with the compilers' caches off (every ``torch.compile`` of a test compiles from
scratch), so a limit holds however warm a submission's caches are: a test that runs cold because an
earlier test failed before compiling the same model is not cut short. The start-up allowance covers
what happens outside any test (starting Python, importing torch, collecting): ``time_factor`` x the
reference's own start-up, at least ``min_startup_s``. A test the reference was never timed on (a new
test, or a GPU test timed on a machine without one) gets ``unmeasured_test_timeout_s`` of CPU.
``--test-timeout`` (CPU seconds for every test) and ``--lab-timeout`` replace the derived values.

Because a part's budget is the sum of its tests' wall limits, a submission whose every test stays within
its own limits is never stopped by the budget, however slow: a correct but slow submission is not
punished. What bounds a submission where *everything* hangs is the streak rule: after
``max_consecutive_timeouts`` tests in a row ran out of time, **from more than one handout step**, the rest
of the part is not run and the lab's status says so (``stopped``). The steps matter: a step's tests call
the function that step asks for, and a step can have many (lab 1's step 11 runs 57 tests that all call its
algebraic simplifier). One hanging function should cost only its own tests, so a streak inside one step
never stops the part, however long; a streak that runs on into the next step stops it. That is also the
rule's limit: where adjacent steps call one function (lab 3's steps 1 and 2 both run the kernel), a hang
in it stops the part in the second step, and the steps after it are not run. It never stops a part
earlier than a bare count would, and the part's budget bounds it either way.

Everything here is a pure function of the rubric and the limits: the supervisor
(:mod:`grader.execute.supervisor`), the in-process timers (:mod:`grader.execute.probe`) and the scorer all
read the same numbers, and ``raw/<lab>/limits.json`` records them for every graded run.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from grader.evidence.events import FULL_CANARY_SHARE
from labkit.labspec import step_listing

if TYPE_CHECKING:
    from grader.course.rubric import LabRubric, Rubric, RubricTest


GiB = 1024**3


@dataclass(frozen=True)
class RunLimits:
    """Time and size limits of one lab's run (the time limits per test and per lab: :mod:`grader.execute.limits`).

    Attributes:
        test_timeout_s: one CPU limit for every test (``--test-timeout``); None: from the reference's times.
        lab_timeout_s: each lab part's wall-clock budget (``--lab-timeout``); None: the sum of its test
            limits, the full canaries' allowance and a start-up allowance.
        time_factor: a test's CPU limit is this many times the reference solution's CPU time on it...
        min_test_timeout_s: ...but never less than this many CPU seconds.
        wall_factor: a test's wall-clock backstop is this many times its CPU limit.
        unmeasured_test_timeout_s: the CPU limit of a test the reference was never timed on.
        min_startup_s: the least start-up allowance (Python, imports, collection) in a lab budget.
        max_consecutive_timeouts: tests in a row that may run out of time before the lab is stopped.
        output_cap_bytes: console output beyond this kills the run (a flood, not a test).
        output_keep_bytes: console output kept after the run (head and tail halves).
        report_cap_bytes: a JSON report larger than this is not read at all (the lab's reason says so).
        memory_cap_bytes: private memory of one graded process and all it starts, together
            (:mod:`grader.execute.resources`, like the four caps below).
        process_cap: processes one graded run may have at once.
        task_cap: threads (of all its processes) one graded run may have at once.
        open_files_cap: files one process may have open.
        file_size_cap_bytes: the largest file a graded process may write.
        disk_cap_bytes: what one graded run's writable folders may hold together.
        files_cap: files and folders one graded run's writable folders may hold.
        cgroup_headroom_bytes: what a run's cgroup (:mod:`grader.execute.cgroup`) allows beyond
            ``memory_cap_bytes`` for page cache and kernel memory, which the watch does not count.
    """

    test_timeout_s: float | None = None
    lab_timeout_s: float | None = None
    time_factor: float = 10.0
    min_test_timeout_s: float = 10.0
    wall_factor: float = 5.0
    unmeasured_test_timeout_s: float = 300.0
    min_startup_s: float = 60.0
    max_consecutive_timeouts: int = 25
    output_cap_bytes: int = 64 * 1024 * 1024
    output_keep_bytes: int = 64 * 1024
    report_cap_bytes: int = 4 * 1024 * 1024
    memory_cap_bytes: int = 8 * GiB
    process_cap: int = 256
    task_cap: int = 4096
    open_files_cap: int = 4096
    file_size_cap_bytes: int = 2 * GiB
    disk_cap_bytes: int = 4 * GiB
    files_cap: int = 200_000
    cgroup_headroom_bytes: int = 1 * GiB


def amount(value: int, unit: str) -> str:
    """``value`` in words: bytes as MiB or GiB, anything else with its unit ("12 processes")."""
    if unit != "bytes":
        return f"{value} {unit}"
    return f"{value / GiB:.1f} GiB" if value >= GiB else f"{value / 1024**2:.0f} MiB"


@dataclass(frozen=True)
class TestLimit:
    """One test's limits: CPU seconds (the limit), wall-clock seconds (the backstop), and why, in words."""

    cpu_s: float
    wall_s: float
    basis: str
    #: For a test that requests shared fixtures: the limits of its setup when it builds them (see
    #: :func:`with_shared_setup`); the supervisor's outside backstop then allows both, one after the other.
    shared_setup: TestLimit | None = None
    shared_fixtures: tuple[str, ...] = ()  # "scope:name" of each shared fixture the test requests

    __test__ = False  # not a pytest test class

    def fixture_keys(self, nodeid: str) -> set[str]:
        """One key per instance of a shared fixture this test (``nodeid``) requests: a module-scoped
        fixture is built once per module, a class-scoped one once per class, and so on."""
        path = nodeid.split("::")[0]
        where = {"session": "", "package": path.rpartition("/")[0], "module": path, "class": nodeid.rpartition("::")[0]}
        return {
            f"{name}@{where.get(scope, nodeid)}"
            for scope, _, name in (entry.partition(":") for entry in self.shared_fixtures)
        }

    def to_dict(self) -> dict[str, Any]:
        shared = {"shared_setup": self.shared_setup.to_dict()} if self.shared_setup else {}
        return {"cpu_s": self.cpu_s, "wall_s": self.wall_s, "basis": self.basis, **shared}


@dataclass(frozen=True)
class LabBudget:
    """The time limits of one lab part's run.

    Attributes:
        tests: node id -> its :class:`TestLimit`.
        default: the limits of a test missing from ``tests``.
        lab_s: the part's wall-clock budget (all its pytest processes together).
        max_consecutive_timeouts: tests in a row that may run out of time before the part is stopped
            (0: never stopped), if they belong to more than one handout step (:meth:`stops_at`).
        steps: node id -> the handout step it grades (its ``lab.toml`` step; for a held-out test off
            every step, its area; else its test function), what :meth:`stops_at` counts.
        reference_s: node id -> the reference's recorded seconds on it (what :meth:`cost` reads to
            draw the full canaries, :func:`grader.evidence.events.full_canaries`).
    """

    tests: dict[str, TestLimit]
    default: TestLimit
    lab_s: float
    max_consecutive_timeouts: int
    reference_s: dict[str, float] = field(default_factory=dict)
    steps: dict[str, str] = field(default_factory=dict)

    def test(self, nodeid: str) -> TestLimit:
        return self.tests.get(nodeid, self.default)

    def cost(self, nodeid: str) -> float | None:
        """What running ``nodeid`` once more is expected to cost: the reference's recorded seconds (its
        wall clock or its CPU time, the larger); None where it was never timed (a GPU test graded on a
        machine without one, a new test)."""
        return self.reference_s.get(nodeid)

    def limit(self, nodeid: str, builds_shared_fixtures: bool = False) -> float:
        """The test's wall-clock backstop (what the supervisor watches from outside); for the test that
        builds shared fixtures (the first in its process to request them), the allowance's for its setup
        plus its own."""
        limit = self.test(nodeid)
        if builds_shared_fixtures and limit.shared_setup is not None:
            return limit.shared_setup.wall_s + limit.wall_s  # the build (its setup), then its own call
        return limit.wall_s

    def stops_at(self, streak: Sequence[str]) -> bool:
        """Whether ``streak`` (real tests in a row that ran out of time) stops the part: at least
        ``max_consecutive_timeouts`` tests, from more than one handout step (never when the limit is 0).

        A step's tests call the function that step asks for, so one hanging function times out its own
        step's tests in a row, however many (lab 1's step 11 has 57): that alone never stops the part, and
        the steps after it are graded. A streak that goes on into the next step stops it, whether another
        function hangs too or adjacent steps call the same one (the module docstring says which).
        """
        if not 0 < self.max_consecutive_timeouts <= len(streak):
            return False
        return len({self.steps.get(nodeid, nodeid) for nodeid in streak}) > 1

    def to_dict(self) -> dict[str, Any]:
        """The form written to ``raw/<lab>/limits.json`` and sent to the probe plugin."""
        return {
            "lab_s": self.lab_s,
            "default": self.default.to_dict(),
            "max_consecutive_timeouts": self.max_consecutive_timeouts,
            "tests": {nodeid: limit.to_dict() for nodeid, limit in self.tests.items()},
        }


def _seconds(value: float) -> str:
    if value < 0.001:
        return "under 1 ms"
    return f"{value:.2g} s" if value < 10 else f"{value:.0f} s"


def _limit(cpu: float, basis: str, limits: RunLimits) -> TestLimit:
    cpu = round(cpu, 1)
    wall = round(limits.wall_factor * cpu, 1)
    return TestLimit(cpu, wall, f"{basis}; a wall-clock backstop of {wall:g} s")


def never_timed_limit(limits: RunLimits) -> TestLimit:
    """The limits of a test the reference solution was never timed on."""
    if limits.test_timeout_s is not None:
        return _limit(float(limits.test_timeout_s), "set with --test-timeout", limits)
    return _limit(limits.unmeasured_test_timeout_s, "the reference solution was never timed on this test", limits)


def limit_for_test(test: RubricTest | None, limits: RunLimits) -> TestLimit:
    """One test's limits and their derivation in words (``test`` None: a test missing from the rubric)."""
    reference = None if test is None else test.reference_cpu_s if test.reference_cpu_s is not None else test.reference_s
    if limits.test_timeout_s is not None or (test is not None and reference is None):
        return never_timed_limit(limits)
    if test is None:
        return _limit(limits.min_test_timeout_s, "the minimum per-test limit", limits)
    scaled = limits.time_factor * reference
    if scaled <= limits.min_test_timeout_s:
        return _limit(
            limits.min_test_timeout_s,
            f"the minimum per-test limit of CPU time; the reference solution takes {_seconds(reference)}",
            limits,
        )
    return _limit(
        scaled, f"{limits.time_factor:g} x the reference solution's {_seconds(reference)} of CPU time", limits
    )


def with_shared_setup(limit: TestLimit, test: RubricTest, never_timed: TestLimit) -> TestLimit:
    """``limit``, with the allowance for building shared fixtures when ``test`` requests any.

    A module- or session-scoped fixture is built in the setup of whichever test that requests it runs
    first: when the reference was timed, maybe another test (or a canary), in another run maybe this
    one, or, after a killed test, the first one pytest runs again. So no recorded time bounds that build:
    the setup of the test that builds it gets ``never_timed`` (the limit of a test the reference was
    never timed on), its call and teardown their own limit after.
    """
    if not test.shared_fixtures or never_timed.cpu_s <= limit.cpu_s:
        return limit
    return replace(limit, shared_setup=never_timed, shared_fixtures=test.shared_fixtures)


def lab_budget(lab: LabRubric, limits: RunLimits, *, heldout: bool = False) -> LabBudget:
    """The limits of one part of ``lab``'s run: its visible tests, or (``heldout``) its held-out ones.

    Each part is its own pytest process (or a few, after a killed test) with its own start-up
    allowance; the reference's recorded start-up (its whole run minus its tests) is counted once per part.
    """
    never_timed = never_timed_limit(limits)
    tests = {
        test.nodeid: with_shared_setup(limit_for_test(test, limits), test, never_timed)
        for test in lab.tests
        if test.heldout == heldout
    }
    if limits.lab_timeout_s is not None:
        lab_s = float(limits.lab_timeout_s)
    else:
        measured = [test.reference_s for test in lab.tests if test.reference_s is not None]
        startup = 0.0
        if lab.reference_wall_s is not None:
            startup = limits.time_factor * max(0.0, lab.reference_wall_s - sum(measured))
        walls = [limit.wall_s for limit in tests.values()]
        # Full canaries (grader.evidence.events.full_canaries) run their twin's body once more: at most
        # FULL_CANARY_SHARE of the tests' limits, and one test whatever its limit.
        canaries = FULL_CANARY_SHARE * sum(walls) + max(walls, default=0.0)
        lab_s = round(sum(walls) + canaries + max(limits.min_startup_s, startup), 1)
    reference = {
        test.nodeid: max(test.reference_s or 0.0, test.reference_cpu_s or 0.0)
        for test in lab.tests
        if test.heldout == heldout and test.reference_s is not None
    }
    steps = {test.nodeid: step_of_test(lab, test) for test in lab.tests if test.heldout == heldout}
    return LabBudget(tests, limit_for_test(None, limits), lab_s, limits.max_consecutive_timeouts, reference, steps)


def step_of_test(lab: LabRubric, test: RubricTest) -> str:
    """The handout step ``test`` grades, in words: its ``lab.toml`` step; for a test off every step (a
    held-out one), its area; else its own test function."""
    step = step_listing(lab.steps, test.name)
    if step is not None:
        return f"step {step.number}"
    return f"area {test.area}" if test.area else f"test {test.name}"


def whole_lab_s(lab: LabRubric, limits: RunLimits) -> float:
    """The longest an honest grading of ``lab`` can take: its visible part, then its held-out part (if any)."""
    parts = [False, True] if lab.heldout_tests else [False]
    return sum(lab_budget(lab, limits, heldout=part).lab_s for part in parts)


#: What a process grading whole submissions (a container, a Slurm task) gets beyond the labs' budgets:
#: start-up, the sandbox, scoring and writing the reports.
GRADING_MARGIN_S = 600.0


def submission_budget_s(rubric: Rubric, limits: RunLimits, labs: Collection[str] | None = None) -> float:
    """The sum of one submission's lab budgets (of ``labs`` only, if given): the longest an honest grading can take."""
    return sum(
        whole_lab_s(lab, limits) for lab in rubric.labs if lab.error is None and (labs is None or lab.lab in labs)
    )


def time_limit_args(limits: RunLimits) -> list[str]:
    """The ``grader run`` options that give another process (a container, a Slurm task) these limits."""
    args = [
        "--time-factor",
        f"{limits.time_factor:g}",
        "--min-test-timeout",
        f"{limits.min_test_timeout_s:g}",
        "--wall-factor",
        f"{limits.wall_factor:g}",
        "--max-consecutive-timeouts",
        str(limits.max_consecutive_timeouts),
    ]
    if limits.test_timeout_s is not None:
        args += ["--test-timeout", f"{limits.test_timeout_s:g}"]
    if limits.lab_timeout_s is not None:
        args += ["--lab-timeout", f"{limits.lab_timeout_s:g}"]
    defaults = RunLimits()
    if limits.memory_cap_bytes != defaults.memory_cap_bytes:
        args += ["--memory-cap", f"{limits.memory_cap_bytes / GiB:g}"]
    if limits.disk_cap_bytes != defaults.disk_cap_bytes:
        args += ["--disk-cap", f"{limits.disk_cap_bytes / GiB:g}"]
    if limits.process_cap != defaults.process_cap:
        args += ["--process-cap", str(limits.process_cap)]
    return args
