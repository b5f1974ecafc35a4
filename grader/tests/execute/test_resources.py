"""Resource caps (:mod:`grader.execute.resources`): the kernel limits reach the graded process, the watch
measures every process of a run and its folders, and a submission that takes the machine loses the
tests that did so, with a reason naming the resource, while its other tests are graded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

from grader.evidence.layout import RAW_DIR, RUN_FILE
from grader.execute.isolation import Bubblewrap, View
from grader.execute.limits import RunLimits, time_limit_args
from grader.execute.resources import ResourceWatch, disk_bytes, disk_use, kernel_limits, limit_setter, run_processes
from grader.runners.local import grade_submission
from grader.tests.conftest import needs_bubblewrap
from grader.tests.corpus import starter_copy

MiB = 1024**2
SMALL = RunLimits(memory_cap_bytes=200 * MiB, process_cap=12, disk_cap_bytes=60 * MiB, open_files_cap=64)


def _start(code: str, limits: RunLimits = SMALL) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        start_new_session=True,
        preexec_fn=limit_setter(kernel_limits(limits, gpu_off=True, uid_of_its_own=False)),
        stdout=subprocess.PIPE,
        text=True,
    )


def _watch_until(process: subprocess.Popen, watch: ResourceWatch, seconds: float = 10.0) -> str | None:
    deadline = time.monotonic() + seconds
    try:
        while process.poll() is None and time.monotonic() < deadline:
            over = watch.check(time.monotonic())
            if over:
                return over
            time.sleep(0.05)
        return None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
        process.wait()


def test_the_kernel_limits_are_set_in_the_started_process():
    process = _start("""
        import resource
        print([resource.getrlimit(kind)[0] for kind in (resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE,
                                                        resource.RLIMIT_CORE, resource.RLIMIT_DATA)]
              + [int(open("/proc/self/oom_score_adj").read())])
    """)
    out, _ = process.communicate(timeout=30)
    assert json.loads(out) == [64, SMALL.file_size_cap_bytes, 0, 200 * MiB, 1000]  # the OOM killer's first pick


def test_one_process_cannot_allocate_past_the_memory_cap_when_cuda_is_hidden():
    process = _start("""
        try:
            block = bytearray(400 * 1024 * 1024)
            print("allocated")
        except MemoryError:
            print("MemoryError")
    """)
    out, _ = process.communicate(timeout=30)
    assert out.strip() == "MemoryError"


def test_the_watch_adds_up_the_memory_of_every_process_of_the_run():
    # Each child stays under the per-process limit (RLIMIT_DATA); together they are over the cap.
    process = _start("""
        import os, time
        for _ in range(3):
            if os.fork() == 0:
                block = bytearray(b"x") * (90 * 1024 * 1024)
                time.sleep(20)
                os._exit(0)
        time.sleep(20)
    """)
    watch = ResourceWatch(process.pid, (), SMALL)
    over = _watch_until(process, watch)
    assert over is not None and over.startswith("private memory:") and "cap of 200 MiB" in over
    assert watch.peaks()["processes"] == 4


def test_a_daemon_that_left_its_parent_is_still_counted():
    process = _start("""
        import os, sys, time
        child = os.fork()
        if child == 0:              # the child starts a grandchild and exits: the grandchild is orphaned
            if os.fork() == 0:
                time.sleep(20)
            os._exit(0)
        os.waitpid(child, 0)
        print("ready", flush=True)
        time.sleep(20)
    """)
    try:
        assert process.stdout.readline().strip() == "ready"
        assert len(run_processes(process.pid)) == 2  # the process and the orphan in its session
    finally:
        os.killpg(process.pid, 9)
        process.wait()


def test_a_fork_bomb_goes_over_the_process_cap():
    process = _start("""
        import os, time
        for _ in range(40):
            if os.fork() == 0:
                time.sleep(20)
                os._exit(0)
        time.sleep(20)
    """)
    over = _watch_until(process, ResourceWatch(process.pid, (), SMALL))
    assert over is not None and over.startswith("processes at once:") and "cap of 12 processes" in over


def test_disk_use_counts_what_is_in_the_folders_and_follows_no_link(tmp_path):
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "big").write_bytes(os.urandom(8 * MiB))
    (inside / "sub").mkdir()
    (inside / "sub" / "small").write_bytes(os.urandom(MiB))
    (inside / "link").symlink_to(outside)
    (inside / "file-link").symlink_to(outside / "big")
    used = disk_bytes([inside])
    assert MiB <= used < 2 * MiB


def test_pages_shared_after_a_fork_are_counted_once():
    # A correct submission: 120 MiB, then a pool of forked workers (as Inductor's compile pool forks).
    # Counted once per process, that is 480 MiB; shared out, about 120 MiB: under a cap of 200 MiB.
    process = _start(
        """
        import os, sys, time
        block = bytearray(b"x") * (120 * 1024 * 1024)
        for _ in range(3):
            if os.fork() == 0:
                time.sleep(20)
                os._exit(0)
        print("ready", flush=True)
        time.sleep(20)
    """,
        replace(SMALL, memory_cap_bytes=200 * MiB),
    )
    try:
        assert process.stdout.readline().strip() == "ready"
        watch = ResourceWatch(process.pid, (), replace(SMALL, memory_cap_bytes=200 * MiB))
        assert watch.check(time.monotonic()) is None, "shared pages were counted once per process"
        assert 110 * MiB < watch.peak_memory_bytes < 200 * MiB
    finally:
        os.killpg(process.pid, 9)
        process.wait()


def test_a_memfd_and_a_file_deleted_while_open_are_counted(tmp_path):
    memfd = _start("""
        import os, time
        fd = os.memfd_create("hold")
        for _ in range(3):
            os.write(fd, b"x" * (90 * 1024 * 1024))
        time.sleep(20)
    """)
    over = _watch_until(memfd, ResourceWatch(memfd.pid, (), SMALL))
    assert over is not None and over.startswith("private memory:"), over
    deleted = _start(f"""
        import os, time
        handle = open({str(tmp_path / "f")!r}, "wb")
        os.unlink({str(tmp_path / "f")!r})
        handle.write(os.urandom(80 * 1024 * 1024))
        handle.flush()
        time.sleep(20)
    """)
    over = _watch_until(deleted, ResourceWatch(deleted.pid, (tmp_path,), SMALL))
    assert over is not None and over.startswith("disk space in its folders:"), over


#: Writes 300 MB to the file at ``path``, maps all of it (``mode``: shared and writable, or private and
#: read-only), closes and unlinks it, then waits.
MAP_AND_UNLINK = """
import ctypes, mmap, os, time
path = {path!r}
with open(path, "wb") as handle:
    for _ in range(30):
        handle.write(b"x" * (10 * 1024 * 1024))
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
with open(path, "r+b") as handle:  # (Python's mmap.mmap would keep a descriptor of its own)
    address = libc.mmap(None, 300 * 1024 * 1024, {mode}, handle.fileno(), 0)
assert address not in (None, ctypes.c_void_p(-1).value)
os.unlink(path)
print("mapped", flush=True)
time.sleep(20)
"""
SHARED_WRITABLE, PRIVATE_READ_ONLY = (
    "mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED",
    "mmap.PROT_READ, mmap.MAP_PRIVATE",
)
#: A disk cap the 300 MB file is well over.
MAPPED_LIMITS = replace(SMALL, disk_cap_bytes=100 * MiB)


def test_a_file_mapped_and_then_deleted_is_counted(tmp_path):
    """Closed and unlinked, a mapped file is in no folder and no descriptor, yet holds its 300 MB."""
    process = _start(MAP_AND_UNLINK.format(path=str(tmp_path / "mapped"), mode=SHARED_WRITABLE), MAPPED_LIMITS)
    assert process.stdout.readline() == "mapped\n"
    over = _watch_until(process, ResourceWatch(process.pid, (tmp_path,), MAPPED_LIMITS))
    assert over is not None and over.startswith("disk space in its folders:"), over


@needs_bubblewrap
def test_a_file_mapped_read_only_in_the_sandboxes_tmp_and_deleted_is_counted(tmp_path):
    """In the sandbox the process names its private folder ``/tmp``: the watch knows that name too, so a
    private read-only mapping (which holds the blocks as well) is found by where the file was."""
    view = View((), (), (), Path("/"), tmp_path / "private")
    isolation = Bubblewrap(sys.executable, Path("/nonexistent-course"))
    isolation.prepare(view)
    code = MAP_AND_UNLINK.format(path="/tmp/mapped", mode=PRIVATE_READ_ONLY)
    launch = isolation.command([sys.executable, "-c", code], {}, view)
    kernel = kernel_limits(MAPPED_LIMITS, gpu_off=True, uid_of_its_own=False)
    try:
        process = subprocess.Popen(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            start_new_session=True,
            preexec_fn=limit_setter(kernel),
            stdout=subprocess.PIPE,
            text=True,
        )
    finally:
        launch.close()
    assert process.stdout.readline() == "mapped\n"
    inside = tuple(Path(name) for name in view.private_folders())
    over = _watch_until(process, ResourceWatch(process.pid, (view.private,), MAPPED_LIMITS, inside=inside))
    assert over is not None and over.startswith("disk space in its folders:"), over


def test_what_the_disk_walk_cannot_count_is_over_the_cap(tmp_path):
    deep = tmp_path / "deep"
    deep.mkdir()
    parent = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(300):  # a path of 6,000 characters: longer than PATH_MAX
        os.mkdir("d" * 19, dir_fd=parent)
        child = os.open("d" * 19, os.O_RDONLY | os.O_DIRECTORY, dir_fd=parent)
        os.close(parent)
        parent = child
    os.close(parent)
    assert "cannot measure" in disk_use([deep], max_entries=10_000).problem
    many = tmp_path / "many"
    many.mkdir()
    for index in range(50):
        (many / str(index)).touch()
    assert disk_use([many], max_entries=40).problem == "more than 40 files and folders"
    assert disk_use([many], max_entries=100).problem == ""


def test_threads_count_against_the_task_cap():
    limits = replace(SMALL, task_cap=20, memory_cap_bytes=1024 * MiB)  # (each thread's stack counts in RLIMIT_DATA)
    process = _start(
        """
        import threading, time
        for _ in range(40):
            threading.Thread(target=time.sleep, args=(20,), daemon=True).start()
        time.sleep(20)
    """,
        limits,
    )
    over = _watch_until(process, ResourceWatch(process.pid, (), limits))
    assert over is not None and over.startswith("threads at once:"), over


def test_the_watch_runs_in_a_thread_of_its_own():
    process = _start("""
        import os, time
        for _ in range(40):
            if os.fork() == 0:
                time.sleep(20)
                os._exit(0)
        time.sleep(20)
    """)
    watch = ResourceWatch(process.pid, (), SMALL).start()
    try:
        deadline = time.monotonic() + 10
        while not watch.over and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.over.startswith("processes at once:"), watch.over
    finally:
        watch.stop()
        os.killpg(process.pid, 9)
        process.wait()


def test_the_caps_travel_to_a_grader_started_elsewhere():
    args = time_limit_args(replace(RunLimits(), memory_cap_bytes=2 * 1024**3, process_cap=64))
    assert args[args.index("--memory-cap") + 1] == "2" and args[args.index("--process-cap") + 1] == "64"
    assert "--disk-cap" not in args  # a default is not repeated


TAKES_THE_MACHINE = '''
"""Demo lab A, written to take the machine: each function but clamp's bounds test goes over one cap."""
import os
import time


def _children(count, work):
    for _ in range(count):
        if os.fork() == 0:
            work()
            os._exit(0)


def add(a, b):
    """Memory: three processes of 90 MB each (each under the per-process limit)."""
    _children(3, lambda: (bytearray(b"x") * (90 * 1024 * 1024), time.sleep(30)))
    time.sleep(30)
    return a + b


def mean(values):
    """One process past the memory cap: the allocation fails in the test."""
    block = bytearray(400 * 1024 * 1024)
    return sum(values) / len(values) + len(block)


def clamp(x, low, high):
    """Correct."""
    return min(max(x, low), high)


def fib(n):
    """Disk: 100 MB into the home folder, then a wait."""
    folder = os.path.join(os.environ["HOME"], "fill")
    os.makedirs(folder, exist_ok=True)
    for index in range(10):
        with open(os.path.join(folder, str(index)), "wb") as handle:
            handle.write(os.urandom(10 * 1024 * 1024))
    time.sleep(30)
    return n
'''


def test_a_submission_that_takes_the_machine_loses_those_tests_and_keeps_the_others(demo_setup, tmp_path):
    submission = starter_copy(tmp_path / "submission")
    (submission / "labA_arith" / "arith.py").write_text(TAKES_THE_MACHINE)
    setup = replace(
        demo_setup,
        options=replace(
            demo_setup.options,
            limits=replace(demo_setup.options.limits, memory_cap_bytes=200 * MiB, disk_cap_bytes=60 * MiB),
        ),
    )
    result = grade_submission(submission, tmp_path / "graded", setup)
    lab = result.lab("labA")
    outcomes = {test.name: test for test in lab.tests if not test.heldout}
    assert lab.status == "graded", lab.reason
    assert outcomes["test_add"].outcome == "crashed" and "private memory" in outcomes["test_add"].message
    assert outcomes["test_mean"].outcome == "failed" and "MemoryError" in outcomes["test_mean"].message
    assert outcomes["test_fib"].outcome == "crashed" and "disk space" in outcomes["test_fib"].message
    assert outcomes["test_clamp"].outcome == "passed" and outcomes["test_clamp_stays_within_bounds"].outcome == "passed"
    run = json.loads((tmp_path / "graded" / RAW_DIR / "labA" / RUN_FILE).read_text())
    assert len(run["over_limit"]) >= 2 and run["peak_use"]["memory_bytes"] > 200 * MiB
