"""Run one part of a lab (its visible tests, or its held-out tests) in isolated pytest processes.

This is the only place the grader starts student code. A lab is graded in two parts, each in its own
process: the visible tests (``test_lab.py``), then the held-out tests (``heldout/``), which the first
process never sees (its view hides every held-out folder: :mod:`grader.execute.isolation`). Each
process

- is started under the grading's isolation, in its own **process group** (``start_new_session``), so
  one ``killpg`` takes pytest and everything it started (under bubblewrap, its PID namespace dies too);
- gets its instructions on a private pipe (the canary seed, the quick tests a canary may copy, the
  tests to skip, every test's time limit) and sends its events on another, which
  :class:`~grader.execute.channel.EventRecorder` checks and records in ``events.jsonl``: the graded
  process never names or reaches a file the scorer reads;
- writes its console output to a third pipe, capped while the run goes on (a flood is killed) and
  kept as head and tail; and its pytest-json-report into a folder of its own, copied out afterwards;
- gets **writable folders of its own**, made fresh before it starts and removed once it has ended (home,
  compiler caches, the report's folder; :func:`process_folders`): no two graded processes share one, so
  nothing a held-out process writes is readable by a later process whose messages a student sees.

**What a graded process wrote is hostile input.** Its JSON report is taken out of its folder by
:func:`grader.evidence.untrusted.read_untrusted` (no link followed, a regular file only, at most
``RunLimits.report_cap_bytes``, never blocking) and parsed with a bound on depth; a report refused for
any of these reasons is not kept and the reason is recorded (``report_problems`` in ``run.json``): the
submission made it so, and its tests are scored from the event record, which the report could only
have taken passes away from. Folders are cleared without following links
(:func:`grader.evidence.untrusted.clear_path`).

**Per-test time limits** (:mod:`grader.execute.limits`) are enforced twice: inside pytest by the
probe's alarm (the test fails and the part goes on), and from outside: a test still running a grace
period after its limit (its code swallowed the alarm, or hangs in native code) has its process group
killed, a ``killed`` event is recorded, and pytest starts again with the tests not yet started. A
**part budget** bounds all those processes (wall clock), and the **streak rule** stops a part after
``max_consecutive_timeouts`` tests in a row ran out of time.

Artifacts in ``raw_dir`` (``raw/<lab>/`` for the visible part, ``raw/<lab>/heldout/`` for the other):
``run.json`` (:class:`RunRecord`), ``limits.json`` (every test's limit and why), ``events.jsonl``,
``report.json`` (``report.1.json``... after a resume; absent after a crash, or when refused), ``output.txt``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from grader.course.labs import CourseError, load_course
from grader.course.rubric import LabRubric
from grader.evidence.events import (
    KILLED_EVENT,
    OVER_LIMIT_EVENT,
    REJECTED_EVENT,
    STOPPED_EVENT,
    is_canary,
    read_events,
    stop_reason,
    timeout_streak,
)  # fmt: skip
from grader.evidence.layout import EVENTS_FILE, HELDOUT_RUN_DIR, LIMITS_FILE, OUTPUT_FILE, RUN_FILE, report_file
from grader.evidence.runs import report_shape_problem
from grader.evidence.text import trim_file
from grader.evidence.untrusted import clear_path, fresh_folder, parse_untrusted_json, read_untrusted
from grader.execute.cgroup import RunCgroup
from grader.execute.channel import EventRecorder, append_event, original_nodeid
from grader.execute.command import REPORT_OMIT, pytest_command, pytest_env
from grader.execute.isolation import Isolation, Unisolated, View
from grader.execute.limits import LabBudget, RunLimits, lab_budget
from grader.execute.preflight import disk_full_error
from grader.execute.resources import ResourceWatch, cuda_hidden, kernel_limits, limit_setter

#: How long the supervisor waits for a killed process's pipes to close.
PIPE_GRACE_S = 5.0


@dataclass(frozen=True)
class RunRecord:
    """How one lab part's pytest processes ended (``run.json``).

    ``timed_out``: the part's budget ran out; ``killed_tests``: tests killed for overrunning their limit
    (pytest started again after each); ``stopped``: why the streak rule stopped the part ("" if it did
    not); ``rejected``: events the supervisor refused (tampering with the results channel);
    ``report_problems``: why a process's JSON report was not kept (a link, a FIFO, over the size cap,
    nested too deeply...), one line per refused report. ``over_limit``: each resource cap a process went
    over (:mod:`grader.execute.resources`; its test, if one was running, is in ``killed_tests`` too);
    ``peak_use``: the most any of the part's processes used of each watched resource.
    """

    lab: str
    package: str
    heldout: bool
    command: list[str]
    exit_code: int | None
    timed_out: bool
    output_flooded: bool
    wall_s: float
    lab_timeout_s: float
    isolation: str
    processes: int = 1
    killed_tests: tuple[str, ...] = ()
    stopped: str = ""
    rejected: int = 0
    report_problems: tuple[str, ...] = ()
    over_limit: tuple[str, ...] = ()
    peak_use: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LabPart:
    """What one part of a lab runs: its pytest targets and what its processes must not see."""

    lab: LabRubric
    heldout: bool
    targets: list[str]
    hidden: tuple[Path, ...]

    @property
    def nodeids(self) -> list[str]:
        return [test.nodeid for test in self.lab.tests if test.heldout == self.heldout]


def lab_parts(lab: LabRubric, sandbox: Path, heldout_dirs: list[Path]) -> list[LabPart]:
    """The parts of ``lab``: its visible tests (seeing no held-out folder), then its held-out tests if any
    (seeing only its own). ``heldout_dirs``: every lab's held-out folder in the sandbox."""
    own = sandbox / lab.package / "heldout"
    visible = LabPart(lab, False, [lab.package, f"--ignore={lab.package}/heldout"], tuple(heldout_dirs))
    if not lab.heldout_tests:
        return [visible]
    return [visible, LabPart(lab, True, [f"{lab.package}/heldout"], tuple(d for d in heldout_dirs if d != own))]


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def overrun_grace_s(limit_s: float) -> float:
    """How long past its limit a test may take to unwind the in-process alarm before it is killed."""
    return 5.0 + 0.1 * limit_s


def overran(
    running: tuple[str, float] | None,
    budget: LabBudget,
    now: float,
    builders: Collection[str] = (),
    call_began: tuple[str, float] | None = None,
) -> str | None:
    """The recorded node id of the running test (``(node id, started)``) when it is past its limit plus
    grace at ``now``, else None. A canary has the limit of the test it copies; a test in ``builders``
    (:class:`SharedFixtureBuilders`) the allowance for building shared fixtures, for its setup only:
    once its call began (``call_began``, the recorder's :meth:`~grader.execute.channel.EventRecorder.call_began`),
    its own limit counts from then, so a call that hangs is stopped as soon as any other test's would be."""
    if running is None:
        return None
    nodeid = original_nodeid(running[0])
    if nodeid in builders and call_began is not None and call_began[0] == running[0]:
        limit, since = budget.limit(nodeid), call_began[1]
    else:
        limit, since = budget.limit(nodeid, builds_shared_fixtures=nodeid in builders), running[1]
    return running[0] if now - since > limit + overrun_grace_s(limit) else None


class SharedFixtureBuilders(set):
    """The tests of one pytest process that build shared fixtures: each first, in that process, to
    request an instance of one (:meth:`~grader.execute.limits.TestLimit.fixture_keys`). Worked out from
    the rubric and the order the tests start in, so graded code cannot claim the allowance."""

    def __init__(self, budget: LabBudget) -> None:
        super().__init__()
        self.budget, self.built, self.last = budget, set(), None

    def saw(self, running: tuple[str, float] | None) -> None:
        """Note the test running now (the recorder's ``now_running``)."""
        if running is None or running == self.last:
            return
        self.last = running
        nodeid = original_nodeid(running[0])
        keys = self.budget.test(nodeid).fixture_keys(nodeid)
        if keys - self.built:
            self.built |= keys
            self.add(nodeid)


@dataclass
class Supervised:
    """How one supervised process ended (see :func:`supervise`)."""

    exit_code: int | None
    timed_out: bool = False
    flooded: bool = False
    overrun: str | None = None  # recorded node id of the test killed for overrunning its limit
    over_limit: str = ""  # the resource cap it went over, in words ("" if none)
    over_limit_test: str | None = None  # recorded node id of the test running then (None: none was)
    peak_use: dict = field(default_factory=dict)  # the most it used of each watched resource
    started: list[str] = field(default_factory=list)  # real tests that started


def _copy_output(pipe: IO[bytes], sink: IO[bytes], cap: int, flooded: threading.Event) -> None:
    written = 0
    for chunk in iter(lambda: pipe.read(65536), b""):
        if written < cap:
            sink.write(chunk[: cap - written])
            sink.flush()
        written += len(chunk)
        if written > cap:
            flooded.set()


def _send(fd: int, payload: bytes) -> None:
    """Write ``payload`` into the graded process's control pipe and close it.

    A process that exits before reading it (pytest could not start) is reported by its exit status;
    the broken pipe, raised by the write or by the close that flushes it, is no news to print.
    """
    try:
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(payload)
    except BrokenPipeError:
        pass


def supervise(
    argv: list[str],
    *,
    env: dict[str, str],
    view: View,
    isolation: Isolation,
    control: dict,
    events_log: IO[bytes],
    output: IO[bytes],
    limits: RunLimits,
    budget: LabBudget,
    deadline: float,
    gpu_off: bool = True,
    plain_canaries: Collection[str] = (),
    streak: Sequence[str] = (),
) -> Supervised:
    """Run one graded pytest process (``argv`` without the channel options) until it exits or must be killed.

    It is killed (its whole group) when the wall clock passes ``deadline`` (``time.monotonic()``), when
    its output passes ``limits.output_cap_bytes``, when a test runs past its limit plus a grace
    period, or when it goes over a resource cap (:mod:`grader.execute.resources`; ``gpu_off``: no CUDA,
    so one process's memory is a kernel limit too). The exit code is negative for a signal (``-11`` =
    segfault), None only if waiting failed. ``plain_canaries``: tests whose canary must not be full
    (:func:`~grader.evidence.events.full_canaries`: one of theirs was killed in an earlier process).
    ``streak``: the real tests in a row that ran out of time in the part's earlier processes (the streak rule
    counts on from them).
    """
    events_read, events_write = os.pipe()
    control_read, control_write = os.pipe()
    verdict_read, verdict_write = os.pipe()
    output_read, output_write = os.pipe()
    recorder = EventRecorder(
        events_log,
        seed=secrets.randbits(63),
        stream_cap_bytes=limits.output_cap_bytes,
        verdicts=verdict_write,
        streak=streak,
        stops=budget.stops_at,  # never stops when max_consecutive_timeouts is 0
        cost=budget.cost,
        plain=plain_canaries,
    )
    argv = [
        *argv,
        "--grader-events-fd",
        str(events_write),
        "--grader-control-fd",
        str(control_read),
        "--grader-verdict-fd",
        str(verdict_read),
    ]
    isolation.prepare(view)
    launch = isolation.command(argv, env, view)
    flooded = threading.Event()
    ended = Supervised(exit_code=None)
    cgroup = RunCgroup.make(limits)
    kernel = kernel_limits(
        limits,
        gpu_off=gpu_off,
        uid_of_its_own=isolation.runs_as_graded_uid,  # the kernel's count of this process's own tasks
    )
    try:
        process = subprocess.Popen(
            launch.argv,
            cwd=view.cwd,
            env=launch.env,
            stdin=subprocess.DEVNULL,
            stdout=output_write,
            stderr=output_write,
            start_new_session=True,
            pass_fds=(events_write, control_read, verdict_read, *launch.pass_fds),
            preexec_fn=limit_setter(kernel, cgroup),
        )
    except BaseException:
        os.close(verdict_write)
        if cgroup:
            cgroup.close()
        raise
    finally:
        for fd in (events_write, control_read, verdict_read, output_write):
            os.close(fd)
        launch.close()
    payload = json.dumps(control).encode()
    threads = [
        threading.Thread(target=_send, args=(control_write, payload), daemon=True),
        threading.Thread(target=recorder.drain, args=(os.fdopen(events_read, "rb"),), daemon=True),
        threading.Thread(
            target=_copy_output,
            args=(os.fdopen(output_read, "rb"), output, limits.output_cap_bytes, flooded),
            daemon=True,
        ),
    ]
    for thread in threads:
        thread.start()
    builders = SharedFixtureBuilders(budget)
    watch = ResourceWatch(
        process.pid,
        (*view.writable, *([view.private] if view.private else [])),
        limits,
        cgroup,
        inside=tuple(Path(name) for name in view.private_folders()),
    ).start()
    try:
        while process.poll() is None:
            now = time.monotonic()
            if now > deadline:
                ended.timed_out = True
            elif flooded.is_set() or recorder.flooded:
                ended.flooded = True
            else:
                running = recorder.now_running()
                builders.saw(running)
                ended.overrun = overran(running, budget, now, builders, recorder.call_began())
                ended.over_limit = "" if ended.overrun else (watch.over or (cgroup.over() if cgroup else "") or "")
                if ended.over_limit:
                    running = recorder.now_running()
                    ended.over_limit_test = running[0] if running else None
            if ended.timed_out or ended.flooded or ended.overrun or ended.over_limit:
                _kill_group(process)
                break
            time.sleep(0.05)
        ended.exit_code = isolation.exit_status(process.wait(timeout=30))
        held = cgroup.over() if cgroup else None  # the kernel may have ended the run itself (its OOM killer)
        if held and not (ended.timed_out or ended.flooded or ended.overrun or ended.over_limit):
            running = recorder.now_running()
            ended.over_limit, ended.over_limit_test = held, running[0] if running else None
    finally:
        watch.stop()
        ended.peak_use = watch.peaks()  # (before the cgroup is closed: its peak is read from it)
        if process.poll() is None:
            _kill_group(process)
            process.wait()
        _kill_group(process)  # children the student's code left behind in the group
        if cgroup:
            cgroup.close()  # and any that left the group: every member of the run's cgroup
        for thread in threads:
            thread.join(timeout=PIPE_GRACE_S)
        recorder.close()
        os.close(verdict_write)
    ended.started = list(recorder.started)
    return ended


def student_files(sandbox: Path) -> list[str]:
    """Every lab's editable files in ``sandbox``, relative to it (the introspection guard's students)."""
    try:
        return [str(path) for path in load_course(sandbox).editable_paths()]
    except CourseError:
        return []


def run_lab(
    sandbox: Path,
    part: LabPart,
    raw_dir: Path,
    *,
    gpu: str,
    limits: RunLimits,
    state: Path,
    isolation: Isolation | None = None,
    python: str = sys.executable,
    threads: int | None = None,
    cold_caches: bool = False,
) -> RunRecord:
    """Run one part of a lab in ``sandbox`` and store its artifacts in ``raw_dir``.

    pytest starts again after every test killed for overrunning its limit (see the module docstring),
    until the part is done, its budget is spent or the streak rule stops it.

    Args:
        state: a folder of the grader's, never visible to graded code as a whole, in which each graded
            process gets fresh writable folders of its own (:func:`process_folders`), removed after it.
    """
    isolation = isolation or Unisolated()
    sandbox, raw_dir = sandbox.absolute(), raw_dir.absolute()
    raw_dir.mkdir(parents=True, exist_ok=True)
    for stale in (*raw_dir.glob("report*.json"), raw_dir / EVENTS_FILE, raw_dir / OUTPUT_FILE):
        stale.unlink(missing_ok=True)
    budget = lab_budget(part.lab, limits, heldout=part.heldout)
    (raw_dir / LIMITS_FILE).write_text(json.dumps(budget.to_dict(), indent=1) + "\n", encoding="utf-8")
    events = raw_dir / EVENTS_FILE
    editable = student_files(sandbox)
    start = time.monotonic()
    killed: list[str] = []
    plain_canaries: set[str] = set()  # tests a killed canary copied: their canaries stay plain after
    started: list[str] = []
    stopped = ""
    commands: list[list[str]] = []
    report_problems: list[str] = []
    over_limit: list[str] = []
    peak_use: dict[str, int] = {}
    with open(events, "ab") as events_log, open(raw_dir / OUTPUT_FILE, "ab") as output:
        while True:
            name = f"{part.lab.lab}-{'heldout' if part.heldout else 'visible'}-{len(commands)}"
            with process_folders(state, name) as (writable, drop, private):
                argv = pytest_command(
                    python,
                    part.targets,
                    sandbox,
                    "--json-report",
                    "--json-report-file",
                    str(drop / REPORT_NAME),
                    "--json-report-omit",
                    *REPORT_OMIT,
                    "-q",
                    "-p",
                    "no:randomly",
                    "-p",
                    "no:timeout",
                )
                commands.append(argv)
                control = {"limits": budget.to_dict(), "skip": [*started, *killed], "editable": editable}
                env = pytest_env(sandbox, gpu, threads, state=writable, cold_caches=cold_caches)
                view = View(
                    readable=(sandbox,), writable=(writable, drop), hidden=part.hidden, cwd=sandbox, private=private
                )
                ended = supervise(
                    argv,
                    env=env,
                    view=view,
                    isolation=isolation,
                    control=control,
                    events_log=events_log,
                    output=output,
                    limits=limits,
                    budget=budget,
                    deadline=start + budget.lab_s,
                    gpu_off=cuda_hidden(gpu),
                    plain_canaries=plain_canaries,
                    streak=timeout_streak(read_events(events)),
                )
                kept = report_file(len(commands) - 1)
                problem = keep_report(drop / REPORT_NAME, raw_dir / kept, limits.report_cap_bytes)
                if problem and (full := disk_full_error(drop)):
                    raise full
                if problem:
                    report_problems.append(f"{kept}: {problem}")
            started += ended.started
            for measured, value in ended.peak_use.items():
                peak_use[measured] = max(peak_use.get(measured, 0), value)
            if ended.over_limit:
                over_limit.append(ended.over_limit)
                append_event(
                    events,
                    OVER_LIMIT_EVENT,
                    reason=ended.over_limit,
                    **({"nodeid": ended.over_limit_test} if ended.over_limit_test else {}),
                )
            victim = ended.overrun or ended.over_limit_test
            if victim is None:
                break
            if not is_canary(victim):
                killed.append(victim)
            else:
                plain_canaries.add(original_nodeid(victim))
            if ended.overrun:
                append_event(
                    events, KILLED_EVENT, nodeid=ended.overrun, limit_s=budget.limit(original_nodeid(ended.overrun))
                )
            streak = timeout_streak(read_events(events))
            remaining = [nodeid for nodeid in part.nodeids if nodeid not in {*started, *killed}]
            if budget.stops_at(streak):
                stopped = stop_reason(len(streak), len(remaining))
                append_event(events, STOPPED_EVENT, streak=len(streak), reason=stopped)
                break
            if not remaining:
                break
    wall = time.monotonic() - start
    rejected = sum(1 for event in read_events(events) if event.get("event") == REJECTED_EVENT)
    trim_file(raw_dir / OUTPUT_FILE, limits.output_keep_bytes)
    record = RunRecord(
        part.lab.lab,
        part.lab.package,
        part.heldout,
        commands[0],
        ended.exit_code,
        ended.timed_out,
        ended.flooded,
        round(wall, 3),
        budget.lab_s,
        isolation.name,
        len(commands),
        tuple(killed),
        stopped,
        rejected,
        tuple(report_problems),
        tuple(over_limit),
        peak_use,
    )
    (raw_dir / RUN_FILE).write_text(json.dumps(asdict(record), indent=1) + "\n", encoding="utf-8")
    return record


def part_raw_dir(lab_raw: Path, part: LabPart) -> Path:
    """Where a part's artifacts go: the lab's raw folder, or its ``heldout/`` sub-folder."""
    return lab_raw / HELDOUT_RUN_DIR if part.heldout else lab_raw


#: The JSON report's name in a process's report folder.
REPORT_NAME = "report.json"


@contextmanager
def process_folders(root: Path, name: str) -> Iterator[tuple[Path, Path, Path]]:
    """Fresh writable folders of one graded process, ``(state, report folder, private)`` under ``root/name``, removed
    when it has ended: whatever an earlier process left under that name (a file where ``home`` was, a
    link) is removed first, without following links (:func:`grader.evidence.untrusted.clear_path`).

    ``state`` holds the process's home and compiler caches (:func:`grader.execute.command.pytest_env`):
    they work within the process and never outlive it, so no later process reads what it wrote.
    ``private`` holds the process's own ``/tmp`` and ``/dev/shm`` (:class:`~grader.execute.isolation.View`).
    """
    if root.is_symlink() or not root.is_dir():
        fresh_folder(root)
    base = fresh_folder(root / name)
    state, drop, private = base / "state", base / "report", base / "private"
    for folder in (state / "home", state / "cache", drop, private):
        folder.mkdir(parents=True)
    try:
        yield state, drop, private
    finally:
        clear_path(base)


def keep_report(report: Path, kept: Path, cap: int) -> str:
    """Copy a process's JSON report out of its folder into ``kept``; answer why it was not kept ("" if it
    was, or if there was none: a process that died before writing it).

    The report is read as hostile input (:func:`grader.evidence.untrusted.read_untrusted`): a link, a
    FIFO, a device, a hard link or a file over ``cap`` bytes is never read; one that does not parse as
    JSON within the depth bound is not kept either, so that no reader of ``raw/`` meets it.
    """
    taken = read_untrusted(report, cap)
    if taken.data is None:
        return "" if taken.missing else f"pytest's JSON report was not used: {taken.problem}"
    value, problem = parse_untrusted_json(taken.data)
    problem = problem or report_shape_problem(value)
    if problem:
        return f"pytest's JSON report was not used: {problem}"
    kept.write_bytes(taken.data)
    return ""
