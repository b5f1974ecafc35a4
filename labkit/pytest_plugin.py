"""The course's pytest plugin, loaded by the top-level ``conftest.py``.

It gives every lab the same harness:

- ``--impl student|solution``: which implementation the ``lab`` fixture returns (default: the student's).
- ``@pytest.mark.points(n)``: what a graded test is worth. Every test in a ``test_lab.py`` must carry
  exactly one; collection fails otherwise, so the rubric can never silently lose a test.
- ``@pytest.mark.gpu``: the test needs CUDA; without it the test is skipped with a clear reason and the
  grader counts its points as *pending*, not failed.
- ``@pytest.mark.zoo``: a long test that enumerates an ecosystem's models (never graded). It runs only
  when asked for, ``-m zoo`` (``nox -s zoo-lab02``); any other run deselects it, so ``nox -s labNN``
  and the project's suite stay fast.
- **Held-out tests** (``<lab>/heldout/test_*.py``, instructor-only: never in the student release) are
  graded like ``test_lab.py`` and run after it. Each carries ``@pytest.mark.area("...")``: what it
  covers, in words a student may read (feedback reports held-out results by area, never the cases),
  and may carry ``@pytest.mark.visibility("after_due_date")`` (default ``hidden``). Tests of
  ``test_lab.py`` are ``visible``: students hold them. The grader's rubric records both markers.
- ``lab``: a fixture returning the lab's public API (the package next to the test file, or its
  reference under ``solutions/``).
- With pytest-json-report active, each test's ``metadata`` carries ``points`` and ``gpu``.
- ``--step N``: run exactly the tests ``lab.toml`` lists for step N of the lab (repeatable; every case of those
  test functions, nothing else; combines with ``-k``, ``-x`` and ``--impl``). A step the lab does
  not have is a usage error naming the steps it has.
- ``--labkit-events FILE`` / ``--labkit-resume`` (used by :mod:`labkit.run_lab`, what ``nox -s labNN``
  runs): a log of the run that survives a crash of the process (:mod:`labkit.event_log`), and a
  resumed run that leaves out the tests already started and prints the step table of the whole run.
- The run ends with each lab's points per handout step and the first step to work on
  (:class:`StepSummary`, text from :mod:`labkit.step_summary`). A test that fails only because a
  starter TODO raises ``NotImplementedError`` is reported as "not implemented", one line in that
  summary instead of a traceback; with an explicit ``--tb`` style (``--tb=long``) it is an ordinary
  failure with its full traceback. Either way it counts as failed (exit status, ``-x``, the grader).
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

import pytest

from labkit import event_log, step_summary
from labkit import impl as impl_switch
from labkit.event_log import EventLog, GradedTest
from labkit.labspec import (
    HIDDEN,
    SPEC_FILE,
    VISIBILITIES,
    VISIBLE,
    LabSpec,
    LabSpecError,
    is_graded_test_file,
    is_heldout_test_file,
    lab_folder_of,
    lab_package_of,
    load_lab_spec,
)  # fmt: skip
from labkit.step_summary import FAILED, NOT_IMPLEMENTED, PASSED, PENDING, SKIPPED, TestOutcome

GPU_SKIP_REASON = "needs a CUDA GPU (graded as pending on machines without one)"
#: The marker of the tests that enumerate a model zoo.
ZOO_MARKER = "zoo"
#: LABKIT_IMPL as it was before ``--impl`` set it (None: unset).
_IMPL_BEFORE = pytest.StashKey[str | None]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("course", "graded lab course")
    group.addoption(
        "--impl",
        choices=impl_switch.IMPLS,
        default=None,
        help="test the student's package (default) or the reference solution under solutions/",
    )
    group.addoption(
        "--step",
        type=int,
        action="append",
        default=None,
        metavar="N",
        help="run only the tests lab.toml lists for step N of the lab (all their cases); repeat it for several steps",
    )
    group.addoption(
        "--labkit-events",
        default=None,
        metavar="FILE",
        help="(used by python -m labkit.run_lab) append one JSON line per test event to FILE",
    )
    group.addoption(
        "--labkit-resume",
        action="store_true",
        help="(used by python -m labkit.run_lab) leave out the tests --labkit-events shows as started",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "points(n): points this graded test is worth (positive integer)")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped (graded as pending) without one")
    config.addinivalue_line(
        "markers", "extension: an optional extension step's test; its points are shown apart from the lab's main score"
    )
    config.addinivalue_line(
        "markers", f"{ZOO_MARKER}: enumerates a model zoo (long, never graded); runs only with -m {ZOO_MARKER}"
    )
    config.addinivalue_line("markers", "area(text): what a held-out test covers, as its feedback names it")
    config.addinivalue_line("markers", f"visibility(level): one of {', '.join(VISIBILITIES)} (held-out tests only)")
    chosen = config.getoption("--impl")
    if chosen is not None:
        # Through the environment so benchmarks and subprocesses started by tests agree; put back
        # at the end of the run, so an in-process run (pytester) does not switch its caller's labs.
        config.stash[_IMPL_BEFORE] = os.environ.get(impl_switch.IMPL_ENV_VAR)
        os.environ[impl_switch.IMPL_ENV_VAR] = chosen
    impl_switch.selected_impl()  # fail early on a bad LABKIT_IMPL
    config.pluginmanager.register(StepSummary(config), "labkit-step-summary")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _IMPL_BEFORE in config.stash:
        before = config.stash[_IMPL_BEFORE]
        if before is None:
            os.environ.pop(impl_switch.IMPL_ENV_VAR, None)
        else:
            os.environ[impl_switch.IMPL_ENV_VAR] = before


def points_of(item: pytest.Item) -> int | None:
    """The points a test is worth, or None when it carries no ``points`` marker."""
    marker = item.get_closest_marker("points")
    return None if marker is None else marker.args[0] if marker.args else None


def _is_graded(item: pytest.Item) -> bool:
    return is_graded_test_file(item.path)


def _function_of(item: pytest.Item) -> str:
    """The test function's name, without parameters (what ``lab.toml`` steps list)."""
    return getattr(item, "originalname", None) or item.name.split("[")[0]


def _marker_text(item: pytest.Item, name: str) -> str | None:
    marker = item.get_closest_marker(name)
    return marker.args[0] if marker is not None and marker.args and isinstance(marker.args[0], str) else None


def visibility_problem(item: pytest.Item) -> str | None:
    """Why ``item``'s visibility or area markers are wrong (None when they are right).

    A held-out test needs an ``area`` and a visibility other than ``visible`` (students never see
    its code); a ``test_lab.py`` test ships to students, so it cannot be hidden.
    """
    level = _marker_text(item, "visibility")
    if item.get_closest_marker("visibility") is not None and level not in VISIBILITIES:
        return f"{item.nodeid}: visibility must be one of {', '.join(VISIBILITIES)}"
    if is_heldout_test_file(item.path):
        if level == VISIBLE:
            return f"{item.nodeid}: a held-out test cannot be visible (students do not have its code)"
        if not (_marker_text(item, "area") or "").strip():
            return f'{item.nodeid}: a held-out test needs @pytest.mark.area("what it covers") for its feedback'
    elif level not in (None, VISIBLE):
        return f"{item.nodeid}: tests of test_lab.py ship to students and cannot be {level}; move it to heldout/"
    return None


def _deselect_zoo_unless_asked(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Zoo tests run only when the ``-m`` expression names them."""
    if ZOO_MARKER in (config.getoption("markexpr", "") or ""):
        return
    zoo = [item for item in items if item.get_closest_marker(ZOO_MARKER) is not None]
    if zoo:
        config.hook.pytest_deselected(items=zoo)
        items[:] = [item for item in items if item.get_closest_marker(ZOO_MARKER) is None]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _deselect_zoo_unless_asked(config, items)
    problems = []
    for item in items:
        if _is_graded(item):
            markers = list(item.iter_markers("points"))
            value = points_of(item)
            if len(markers) != 1 or not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(f"{item.nodeid}: needs exactly one @pytest.mark.points(n) with n a positive int")
            problem = visibility_problem(item)
            if problem:
                problems.append(problem)
            elif item.get_closest_marker("visibility") is None:
                item.add_marker(pytest.mark.visibility(HIDDEN if is_heldout_test_file(item.path) else VISIBLE))
        if item.get_closest_marker("gpu") is not None:
            import torch

            if not torch.cuda.is_available():
                item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))
    if problems:
        raise pytest.UsageError("graded tests without valid points or visibility:\n  " + "\n  ".join(problems))
    # Held-out tests run after the visible ones (a stable sort keeps each group's order).
    items.sort(key=lambda item: is_heldout_test_file(item.path))


@pytest.hookimpl(optionalhook=True)
def pytest_json_runtest_metadata(item: pytest.Item, call: pytest.CallInfo) -> dict:
    """Record each test's points and GPU need in pytest-json-report's per-test ``metadata``."""
    if call.when != "setup":
        return {}
    return {"points": points_of(item), "gpu": item.get_closest_marker("gpu") is not None}


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> ModuleType:
    """The public API of the lab whose folder holds this test file, held-out tests included (student or
    reference, per ``--impl``)."""
    return impl_switch.load_lab(lab_package_of(request.path))


class StepSummary:
    """Collects the outcome of every graded test and prints each lab's points per handout step.

    Registered by :func:`pytest_configure`; one instance per pytest run.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.specs: dict[Path, LabSpec | str] = {}  # lab folder -> its spec, or why it could not be read
        # nodeid -> (lab folder, function, points, gpu, held-out)
        self.graded: dict[str, tuple[Path, str, int, bool, bool]] = {}
        self.outcomes: dict[str, TestOutcome] = {}
        self.partial: set[Path] = set()  # labs some of whose tests were deselected
        events_path = config.getoption("--labkit-events")
        self.log = EventLog(events_path) if events_path else None
        # Resumed after a crash: what the earlier processes of this run did (see labkit.event_log).
        self.earlier = event_log.read_events(events_path) if events_path and config.getoption("--labkit-resume") else []
        if self.log is not None:
            self.log.write(event_log.CONFIGURE, pid=os.getpid())

    def spec_for(self, folder: Path) -> LabSpec | None:
        """The ``lab.toml`` next to a graded test file (read once; None when it is missing or invalid)."""
        if folder not in self.specs:
            try:
                self.specs[folder] = load_lab_spec(folder.name, folder.parent)
            except LabSpecError as error:
                self.specs[folder] = str(error)
        spec = self.specs[folder]
        return spec if isinstance(spec, LabSpec) else None

    def compact_tracebacks(self) -> bool:
        """True unless the user chose a traceback style (``--tb=long`` shows the TODO tracebacks again)."""
        return self.config.getoption("tbstyle", "auto") == "auto"

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.partial.update(lab_folder_of(item.path) for item in items if _is_graded(item))

    def pytest_report_header(self, config: pytest.Config) -> str | None:
        if not self.earlier:
            return None
        crashed = len(event_log.crashes(self.earlier))
        return (
            f"resumed after {crashed} test(s) crashed the test process: the {len(event_log.started(self.earlier))} "
            "tests started before are left out, and their outcomes are in the step table"
        )

    @pytest.hookimpl(trylast=True)  # after the points check and -k: the items the run would take
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        numbers = config.getoption("--step")
        if numbers:
            keep = self.select_steps(numbers, items)
            kept = {item.nodeid for item in keep}
            deselected = [item for item in items if item.nodeid not in kept]
            items[:] = keep
            if deselected:
                config.hook.pytest_deselected(items=deselected)
        if self.earlier:
            self.resume(config, items)

    def select_steps(self, numbers: list[int], items: list[pytest.Item]) -> list[pytest.Item]:
        """The items that belong to any of the steps ``numbers`` of their lab's ``lab.toml`` (in collection order).

        Raises:
            pytest.UsageError: no lab's graded tests were collected, or a collected lab has no such step.
        """
        labs = {lab_folder_of(item.path) for item in items if _is_graded(item)}
        specs = {folder: self.spec_for(folder) for folder in labs if (folder / SPEC_FILE).is_file()}
        if not specs:
            raise pytest.UsageError(
                f"--step {numbers[0]}: no lab's graded tests were collected (run a lab: nox -s lab01 -- --step 1)"
            )
        tests: dict[Path, set[str]] = {}
        for folder, spec in sorted(specs.items()):
            if spec is None:
                raise pytest.UsageError(f"--step {numbers[0]}: {self.specs[folder]}")
            for number in numbers:
                step = next((step for step in spec.steps if step.number == number), None)
                if step is None:
                    have = ", ".join(str(step.number) for step in spec.steps)
                    raise pytest.UsageError(
                        f"--step {number}: {spec.id} has no step {number}; its steps are {have} (lab.toml)"
                    )
                tests.setdefault(folder, set()).update(step.tests)
        return [
            item for item in items
            if _is_graded(item) and _function_of(item) in tests.get(lab_folder_of(item.path), ())
        ]  # fmt: skip

    def resume(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Leave out the tests an earlier process of this run started; take in their outcomes."""
        for nodeid, (graded, outcome) in event_log.earlier_outcomes(self.earlier).items():
            self.graded[nodeid] = (Path(graded.folder), graded.function, graded.points, graded.gpu, graded.heldout)
            self.outcomes[nodeid] = outcome
        started = event_log.started(self.earlier)
        items[:] = [item for item in items if item.nodeid not in started]
        maxfail = config.getoption("maxfail")
        if maxfail:  # -x / --maxfail count the earlier processes' failures too
            failed = sum(outcome.outcome in (FAILED, NOT_IMPLEMENTED) for outcome in self.outcomes.values())
            if failed >= maxfail:
                items[:] = []
            else:
                config.option.maxfail = maxfail - failed

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            folder = lab_folder_of(item.path)
            if _is_graded(item) and (folder / SPEC_FILE).is_file():
                function = _function_of(item)
                points = points_of(item)
                gpu = item.get_closest_marker("gpu") is not None
                self.graded[item.nodeid] = (folder, function, points if isinstance(points, int) else 0, gpu,
                                            is_heldout_test_file(item.path))  # fmt: skip

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo) -> Generator[None, object, object]:
        report = yield
        if call.excinfo is not None and item.nodeid in self.graded:
            spec = self.spec_for(self.graded[item.nodeid][0])
            todo = spec and step_summary.starter_todo(call.excinfo.value, spec)
            if todo:
                report.labkit_not_implemented = todo
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport) -> tuple[str, str, str] | None:
        if report.failed and getattr(report, "labkit_not_implemented", None) and self.compact_tracebacks():
            return NOT_IMPLEMENTED, "N", "NOT IMPLEMENTED"
        return None

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if self.log is not None:
            known = self.graded.get(nodeid)
            graded = asdict(GradedTest(str(known[0]), *known[1:])) if known else None
            self.log.write(event_log.START, nodeid=nodeid, graded=graded)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        if self.log is not None:
            outcome = self.outcomes.get(nodeid)
            self.log.write(event_log.FINISH, nodeid=nodeid, outcome=asdict(outcome) if outcome else None)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.log is not None:
            self.log.write(event_log.SESSION_FINISH, exitstatus=int(exitstatus))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.graded:
            return
        _, function, points, gpu, heldout = self.graded[report.nodeid]
        previous = self.outcomes.get(report.nodeid)
        if previous is not None and previous.outcome in (FAILED, NOT_IMPLEMENTED):
            return  # the first failure of a test (setup, call or teardown) is its outcome
        if report.failed:
            todo = getattr(report, "labkit_not_implemented", None)
            outcome, message = (NOT_IMPLEMENTED, todo) if todo else (FAILED, _failure_line(report))
        elif report.skipped:
            outcome, message = (PENDING if gpu else SKIPPED), ""
        elif report.when == "call":
            outcome, message = PASSED, ""
        else:
            return
        self.outcomes[report.nodeid] = TestOutcome(report.nodeid, function, points, outcome, message, heldout)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter) -> None:
        by_lab: dict[Path, list[TestOutcome]] = {}
        for nodeid, outcome in self.outcomes.items():
            by_lab.setdefault(self.graded[nodeid][0], []).append(outcome)
        for folder, outcomes in sorted(by_lab.items()):
            spec = self.spec_for(folder)
            if spec is None:
                terminalreporter.write_line(f"(no points per step for {folder.name}: {self.specs[folder]})")
                continue
            terminalreporter.write_sep("=", step_summary.summary_title(spec, outcomes), bold=True)
            lines = step_summary.summary_lines(
                spec, outcomes, partial=folder in self.partial, tracebacks_shown=not self.compact_tracebacks()
            )
            for line in lines:
                terminalreporter.write_line(line)


def _failure_line(report: pytest.TestReport) -> str:
    """The first line of a failure's message (pytest's crash line), shortened."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "failed")
    return step_summary.shorten(text.splitlines()[0] if text.strip() else "failed")
