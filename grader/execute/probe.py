"""The grader's pytest plugin, loaded into every graded run with ``-p grader.execute.probe``.

It runs inside the process that runs a student's code, so it is small, imports only the standard
library, pytest and :mod:`grader.evidence.events`, and keeps nothing on disk. Its jobs:

1. **Events down a pipe** (``--grader-events-fd N``). One JSON line per event (the vocabulary:
   :mod:`grader.evidence.events`), written with one unbuffered ``os.write`` to a pipe the supervisor
   reads as the run goes. A crash, ``os._exit`` or a kill loses nothing already sent, and there is no
   file a student's code could rewrite afterwards: the supervisor checks every event and records it
   where no graded process can reach (:mod:`grader.execute.supervisor`).
2. **Its instructions from the supervisor** (``--grader-control-fd M``): one JSON object read from a
   second pipe at start-up, before any test module (so any student code) is imported, and the pipe
   closed: the tests to skip when resuming after a killed test and every test's time limit.
3. **Canaries** (see :mod:`grader.evidence.events`): after collection each test becomes a pair of
   twins, two copies made the same way (name, node id, markers, fixtures, and one body: the same
   function, its code object, its closure). The probe does not know which twin is the canary: the
   supervisor holds the seed and answers one byte on a third pipe (``--grader-verdict-fd``) when the
   call begins: run the test, or fail (a canary). A *full* canary is told "run" like its twin, and
   when the body returns the probe asks again (a ``returned`` event): then a full canary fails. After
   each test another byte says go on or stop (the streak rule, counted by the supervisor). Only after
   the call does this process know what a plain canary was (it then names the canary's reports apart,
   for pytest-json-report); a full canary whose body failed it never learns.
4. **The rubric** (``--grader-rubric FILE``, with ``--collect-only`` on the pristine course): every
   collected test's node id, function name, points, GPU need, visibility, area and shared fixtures
   (the course's fixtures of a wider scope than one test that it requests), written as JSON.
5. **Per-test time limits** (:mod:`grader.execute.limits`): two alarms armed while the test's setup,
   call and teardown run (not while pytest reports them), one on the process's CPU time (``SIGPROF``),
   one on the wall clock (``SIGALRM``, the backstop), raise :class:`TestTimeLimit` in the test's code
   when its limit passes; each phase's CPU time is reported. A setup that builds a shared fixture
   (none cached yet) has the limit of a test never timed instead, and the call its own after.
   ``TestTimeLimit`` derives from ``BaseException`` (like ``KeyboardInterrupt``), which Hypothesis,
   ``except Exception`` and ``pytest.raises(Exception)`` all let through, so the test fails at once
   and alone (pytest-timeout's ``Failed`` is caught by Hypothesis, which re-runs the hanging example
   with no alarm left). Its report event carries ``"timeout": true``. Code that swallows even a
   ``BaseException``, or hangs in native code, is killed from outside by the supervisor, which then
   starts pytest again to go on after it.

Everything here can be undone by code running in the same process: the probe *detects* tampering with
pytest's results (a canary passes, or its event stream breaks the run order), it cannot prevent it.
What it guarantees is narrower: before a call, nothing in this process's memory tells a canary from
its test, because that fact is not in this process until the call asks for it; and a failing call of
a full canary is never told, so rewriting a failure that called the submission's code risks the run.
"""

from __future__ import annotations

import functools
import json
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

try:
    import resource
except ImportError:  # Windows: no children's CPU time
    resource = None

from grader.evidence.events import (
    COLLECT_ERROR,
    COLLECTED,
    CONFIGURE,
    FINISH,
    INTROSPECTION_EVENT,
    REPORT,
    RETURNED,
    SESSION_FINISH,
    START,
    STOP,
    VERDICT_CANARY,
    canary_nodeid,
)  # fmt: skip
from grader.execute.introspection_guard import install as install_introspection_guard

#: Longest failure message kept per event (the full text stays in pytest-json-report's report).
MESSAGE_LIMIT = 2000
#: The least time a phase gets once a test's limit is spent (a teardown after a timed-out call).
MIN_PHASE_S = 1.0


class TestTimeLimit(BaseException):
    """Raised in a test's code when it runs past its time limit (see the module docstring)."""

    __test__ = False  # not a pytest test class


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("grader", "course autograder (internal)")
    group.addoption("--grader-events-fd", type=int, default=None, help="write one JSON line per test event here")
    group.addoption("--grader-control-fd", type=int, default=None, help="read the supervisor's instructions here")
    group.addoption("--grader-verdict-fd", type=int, default=None, help="read each call's verdict here")
    group.addoption("--grader-rubric", default=None, help="write the collected tests' points as JSON here")


class EventChannel:
    """One JSON line per event on an inherited pipe, written with a single unbuffered ``os.write``.

    Only the process that opened it writes: a child forked by a test (which inherits the descriptor)
    stays silent, so it cannot put a second copy of the run into the stream.
    """

    def __init__(self, fd: int) -> None:
        self._fd, self._pid = fd, os.getpid()

    def write(self, event: str, **fields: Any) -> None:
        if os.getpid() != self._pid:
            return
        line = json.dumps({"event": event, "t": round(time.time(), 3), **fields}, default=str, ensure_ascii=False)
        try:
            os.write(self._fd, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass  # the supervisor is gone (it killed this process group): nothing left to tell


def read_control(fd: int) -> dict[str, Any]:
    """The supervisor's instructions: one JSON object, read to the end of the pipe, which is then closed."""
    chunks = []
    with os.fdopen(fd, "rb", closefd=True) as pipe:
        while chunk := pipe.read(65536):
            chunks.append(chunk)
    data = json.loads(b"".join(chunks) or b"{}")
    return data if isinstance(data, dict) else {}


def short_message(report: pytest.TestReport | pytest.CollectReport) -> str:
    """One readable line or paragraph saying why a phase did not pass (the skip reason for skips)."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        return str(longrepr[2])[:MESSAGE_LIMIT]
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message[:MESSAGE_LIMIT]
    return str(longrepr)[-MESSAGE_LIMIT:]  # a collection traceback: the error is at its end


class TimeKeeper:
    """The per-test limits (see the module docstring).

    Each test has a CPU limit, counted by ``ITIMER_PROF`` (the CPU time of every thread of this
    process), and a wall-clock backstop, counted by ``ITIMER_REAL``; both are shared by its setup, call
    and teardown. Either raises :class:`TestTimeLimit` in the test's code. Each phase's CPU time (this
    process's and that of its children that ended) goes into its report event as ``cpu``.
    """

    def __init__(self, limits: dict[str, Any]) -> None:
        self.tests: dict[str, dict[str, Any]] = limits.get("tests", {})
        self.default: dict[str, Any] = limits.get("default", {"cpu_s": 60.0, "wall_s": 300.0, "basis": ""})
        self.has_alarm = hasattr(signal, "setitimer")  # not on Windows: the supervisor's kill still applies
        self.phase_cpu = 0.0

    def begin(self, nodeid: str, building: list[str] = ()) -> None:
        """A new test: its whole limits are left, shared by its setup, call and teardown.

        When its setup builds shared fixtures (``building``; whichever test asks first does), its setup
        has the allowance for that build instead (the limit of a test never timed, if that is more: the
        test's recorded time may not include the build), and its call and teardown its own limits after.
        """
        own = self.tests.get(nodeid, self.default)
        allowance = own.get("shared_setup")
        self.after_setup = None
        if building and allowance and allowance["cpu_s"] > own["cpu_s"]:
            self.after_setup = own
            self._start(allowance, f"its setup builds the shared fixture(s) {', '.join(building)}: ")
        else:
            self._start(own)

    def end_setup(self) -> None:
        """After a setup that built shared fixtures: the call and teardown get the test's own limits."""
        if self.after_setup is not None:
            self._start(self.after_setup)
            self.after_setup = None

    def _start(self, limit: dict[str, Any], why: str = "") -> None:
        self.cpu_left, self.wall_left = float(limit["cpu_s"]), float(limit["wall_s"])
        basis = f" ({why}{limit['basis']})" if limit.get("basis") else ""
        self.messages = {
            getattr(
                signal, "SIGPROF", -1
            ): f"this test ran over its time limit of {self.cpu_left:g} s of CPU time{basis}",
            getattr(signal, "SIGALRM", -2): f"this test ran over its wall-clock limit of {self.wall_left:g} s without "
            f"using up its CPU time (sleeping, waiting or deadlocked?){basis}",
        }

    @staticmethod
    def _cpu_now() -> float:
        if resource is None:  # Windows
            return time.process_time()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + children.ru_utime + children.ru_stime

    def arm(self) -> None:
        """Start both alarms for one phase with what is left of the test's limits (at least a second each,
        so that a teardown after a timed-out call still runs)."""
        self.phase_start, self.phase_cpu_start, self.own_cpu_start = (
            time.monotonic(),
            self._cpu_now(),
            time.process_time(),
        )
        if not self.has_alarm:
            return
        messages = self.messages

        def on_alarm(signum: int, frame: Any) -> None:
            raise TestTimeLimit(messages[signum])

        for signum, timer, left in (
            (signal.SIGPROF, signal.ITIMER_PROF, self.cpu_left),
            (signal.SIGALRM, signal.ITIMER_REAL, self.wall_left),
        ):
            signal.signal(signum, on_alarm)
            signal.setitimer(timer, max(left, MIN_PHASE_S))

    def disarm(self) -> None:
        if self.has_alarm:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
        self.cpu_left -= time.process_time() - self.own_cpu_start
        self.wall_left -= time.monotonic() - self.phase_start
        self.phase_cpu = self._cpu_now() - self.phase_cpu_start


class Verdicts:
    """The supervisor's answers, one byte each, on an inherited pipe (see the module docstring).

    The answer for an item is read when its call begins, or, if its setup did not pass (no call
    follows), when that setup is reported; and once more if its body returned (a full canary then
    learns what it was). The go-on-or-stop byte after each test is read with a time
    limit, so a supervisor that refused the test's events (a void run) cannot hang the process.
    """

    #: How long the end-of-test read waits for the supervisor (it answers within milliseconds).
    END_WAIT_S = 30.0

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def read(self, wait_s: float | None = None) -> bytes:
        if wait_s is not None and not select.select([self._fd], [], [], wait_s)[0]:
            return b""
        try:
            return os.read(self._fd, 1)
        except OSError:
            return b""


_channel: EventChannel | None = None
_clock: TimeKeeper | None = None
_verdicts: Verdicts | None = None
_session: pytest.Session | None = None
#: Per item: its position in the run order (not secret: every item has one), and, once its verdict
#: has been read, whether it was the canary (known only after its call began).
_POSITION = pytest.StashKey[int]()
_WAS_CANARY = pytest.StashKey[bool]()


def _emit(event: str, **fields: Any) -> None:
    if _channel is not None:
        _channel.write(event, **fields)


def _wrapped(function: Callable, body: Callable) -> Callable:
    """``body`` dressed as ``function`` (name, docstring, attributes, ``__wrapped__``: so pytest and
    Hypothesis see the same test), a new object either way."""
    return functools.wraps(function)(body)


def _verdict(item: pytest.Item) -> bool:
    """Whether ``item`` is a canary: asks the supervisor the first time, remembers the answer after."""
    if _WAS_CANARY not in item.stash:
        item.stash[_WAS_CANARY] = _verdicts is not None and _verdicts.read() == VERDICT_CANARY
    return item.stash[_WAS_CANARY]


def _canary_after_all(item: pytest.Item) -> bool:
    """``item``'s body returned: ask the supervisor whether it was a full canary (then it fails)."""
    if _verdicts is None:
        return False
    _emit(RETURNED, nodeid=item.nodeid)
    item.stash[_WAS_CANARY] = _verdicts.read(Verdicts.END_WAIT_S) == VERDICT_CANARY
    return item.stash[_WAS_CANARY]


def _twin_body(function: Callable, item_of: Callable[[], pytest.Item]) -> Callable:
    """The one body every item runs: ask the supervisor, then fail (a canary) or run ``function``;
    when it returns, ask again (a full canary, which ran the test like its twin, fails then)."""

    def body(*args: Any, **kwargs: Any) -> Any:
        if _verdict(item_of()):
            raise AssertionError  # a canary always fails
        result = function(*args, **kwargs)
        if _canary_after_all(item_of()):
            raise AssertionError  # a full canary fails too, but only after its twin's body passed
        return result

    return _wrapped(function, body)


def _twin(item: pytest.Function) -> pytest.Function:
    """A copy of ``item`` (name, node id, markers, parameters, fixtures) running :func:`_twin_body`."""
    holder: list[pytest.Function] = []
    twin = pytest.Function.from_parent(
        item.parent,
        name=item.name,
        callspec=getattr(item, "callspec", None),
        callobj=_twin_body(item.obj, lambda: holder[0]),
        fixtureinfo=item._fixtureinfo,
        keywords=dict(item.keywords),
        originalname=item.originalname,
    )
    twin.own_markers = list(item.own_markers)
    holder.append(twin)
    return twin


def arrange_twins(items: list[pytest.Item]) -> None:
    """Replace each test by its pair of twins, in place (other items keep their places at the end)."""
    ordered: list[pytest.Item] = []
    for item in items:
        if isinstance(item, pytest.Function):
            ordered += [_twin(item), _twin(item)]
    for position, item in enumerate(ordered):
        item.stash[_POSITION] = position
    items[:] = ordered + [item for item in items if not isinstance(item, pytest.Function)]


def pytest_configure(config: pytest.Config) -> None:
    global _channel, _clock, _verdicts
    events_fd = config.getoption("--grader-events-fd")
    if events_fd is not None:
        _channel = EventChannel(events_fd)
    control_fd = config.getoption("--grader-control-fd")
    control = read_control(control_fd) if control_fd is not None else {}
    verdict_fd = config.getoption("--grader-verdict-fd")
    if verdict_fd is not None:
        _verdicts = Verdicts(verdict_fd)
    config.stash[_SKIP] = set(control.get("skip", ()))
    root = config.rootpath
    install_introspection_guard(
        [str(root / path) for path in control.get("editable", ())],
        lambda what, file, line: _emit(INTROSPECTION_EVENT, what=what, file=_relative(file, root), line=line),
    )
    if "limits" in control:
        _clock = TimeKeeper(control["limits"])
    _emit(CONFIGURE, pid=os.getpid())


_SKIP = pytest.StashKey[set]()


def _relative(path: str, root: Any) -> str:
    try:
        return os.path.relpath(path, root)
    except ValueError:
        return path


def pytest_sessionstart(session: pytest.Session) -> None:
    global _session
    _session = session


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _emit(COLLECT_ERROR, nodeid=report.nodeid, message=short_message(report))


def _marker_arg(item: pytest.Item, name: str, default: Any = None) -> Any:
    marker = item.get_closest_marker(name)
    return marker.args[0] if marker is not None and marker.args else default


def _shared_fixture_defs(item: pytest.Item) -> dict[str, Any]:
    """The fixtures ``item`` requests (directly or through other fixtures) that have a scope wider than
    one test and come from the course, not from pytest itself: name -> the definition that applies."""
    info = getattr(item, "_fixtureinfo", None)
    shared = {}
    for name, definitions in info.name2fixturedefs.items() if info is not None else ():
        definition = definitions[-1] if definitions else None
        module = getattr(getattr(definition, "func", None), "__module__", "") or ""
        if definition is not None and definition.scope != "function" and not module.startswith(("_pytest", "pytest")):
            shared[name] = definition
    return shared


def shared_fixtures_to_build(item: pytest.Item) -> list[str]:
    """The shared fixtures (:func:`_shared_fixture_defs`) that ``item``'s setup will build: none is
    cached yet, so this test, whichever it is, pays for them."""
    return sorted(
        name
        for name, definition in _shared_fixture_defs(item).items()
        if getattr(definition, "cached_result", None) is None
    )


def rubric_entry(item: pytest.Item) -> dict[str, Any]:
    """What the grader needs to know about one collected test (the course plugin has set ``visibility``)."""
    return {
        "nodeid": item.nodeid,
        "name": getattr(item, "originalname", item.name),
        "points": _marker_arg(item, "points"),
        "gpu": item.get_closest_marker("gpu") is not None,
        "extension": item.get_closest_marker("extension") is not None,
        "visibility": _marker_arg(item, "visibility", "visible"),
        "area": _marker_arg(item, "area", ""),
        "shared_fixtures": sorted(
            f"{definition.scope}:{name}" for name, definition in _shared_fixture_defs(item).items()
        ),
    }


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # trylast: the course plugin has already validated every points marker by now.
    skip = config.stash.get(_SKIP, set())
    if skip:
        done = [item for item in items if item.nodeid in skip]
        items[:] = [item for item in items if item.nodeid not in skip]
        config.hook.pytest_deselected(items=done)
    rubric_path = config.getoption("--grader-rubric")
    if rubric_path:
        with open(rubric_path, "w", encoding="utf-8") as handle:
            json.dump({"tests": [rubric_entry(item) for item in items]}, handle, indent=1)
    _emit(COLLECTED, nodeids=[item.nodeid for item in items])
    if _verdicts is not None:
        arrange_twins(items)


def _timed_phase(begin: bool):
    """A phase hook wrapper running the test's code (fixtures, the test) under the alarm.

    Only the phases are timed, not pytest's reporting between them: an exception raised there would
    be a pytest INTERNALERROR that ends the session, while inside a phase pytest reports it as that
    phase's failure, and the next test runs.
    """

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def wrapper(item: pytest.Item):
        if _clock is None:
            yield
            return
        if begin:
            _clock.begin(item.nodeid, shared_fixtures_to_build(item))
        _clock.arm()
        try:
            yield
        finally:
            _clock.disarm()
            if begin:
                _clock.end_setup()

    return wrapper


pytest_runtest_setup = _timed_phase(begin=True)
pytest_runtest_call = _timed_phase(begin=False)
pytest_runtest_teardown = _timed_phase(begin=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if _POSITION in item.stash and (report.when != "setup" or not report.passed) and _verdict(item):
        # After the call (or a setup that did not pass: no call follows), this item's verdict is known;
        # a canary's reports get its own node id, so pytest-json-report never mixes it with its twin's.
        report.nodeid = canary_nodeid(item.stash[_POSITION], report.nodeid)
    if _clock is not None:
        report.grader_cpu = _clock.phase_cpu
    if call.excinfo is not None and call.excinfo.errisinstance(TestTimeLimit):
        report.grader_timeout = True


def pytest_runtest_logstart(nodeid: str) -> None:
    _emit(START, nodeid=nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    timeout = {"timeout": True} if getattr(report, "grader_timeout", False) else {}
    _emit(
        REPORT,
        nodeid=report.nodeid,
        when=report.when,
        outcome=report.outcome,
        message=short_message(report) if not report.passed else "",
        duration=round(report.duration, 4),
        cpu=round(getattr(report, "grader_cpu", 0.0), 4),
        **timeout,
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    if _verdicts is None or _POSITION not in item.stash:
        return
    _verdict(item)  # an item whose setup was skipped or errored before its reports were made
    if _verdicts.read(Verdicts.END_WAIT_S) == STOP and _session is not None:
        _session.shouldstop = "too many tests in a row ran out of time"


def pytest_runtest_logfinish(nodeid: str) -> None:
    _emit(FINISH, nodeid=nodeid)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _emit(SESSION_FINISH, exitstatus=int(exitstatus))
