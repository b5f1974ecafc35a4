"""A cgroup per graded run (:mod:`grader.execute.cgroup`): the kernel holds memory the watch cannot see
and refuses forks past the thread cap, and no member of a run outlives it. The tests that need a
cgroup skip, saying why, where the grader may not make one (not root, no cgroup v1 hierarchies)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from grader.evidence.layout import RAW_DIR, RUN_FILE
from grader.execute.cgroup import RunCgroup, _own_groups, cgroup_support
from grader.execute.limits import RunLimits
from grader.runners.local import grade_submission
from grader.tests.corpus import starter_copy

MiB = 1024**2
_groups, NO_CGROUP = cgroup_support()
needs_cgroup = pytest.mark.skipif(bool(NO_CGROUP), reason=f"no cgroup for graded runs here: {NO_CGROUP}")

MOUNTINFO = """\
24 30 0:21 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
25 24 0:22 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
26 24 0:23 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
27 24 0:24 /docker/abc /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct
28 24 0:25 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
OWN = "8:pids:/\n4:memory:/jobs/42\n2:cpu,cpuacct:/docker/abc\n0::/\n"


def test_the_graders_own_group_is_found_in_each_hierarchy():
    assert _own_groups(MOUNTINFO, OWN) == {
        "memory": Path("/sys/fs/cgroup/memory/jobs/42"),
        "pids": Path("/sys/fs/cgroup/pids"),
        "cpu": Path("/sys/fs/cgroup/cpu"),
    }  # its root is the container's group
    # a container sees its own group as its hierarchy's root
    container = MOUNTINFO.replace("0:22 / /sys/fs/cgroup/memory", "0:22 /jobs/42 /sys/fs/cgroup/memory")
    assert str(_own_groups(container, OWN)["memory"]) == "/sys/fs/cgroup/memory"
    assert "memory" not in _own_groups(MOUNTINFO.replace(",memory", ",blkio"), OWN)


def _in_group(run: RunCgroup, code: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        start_new_session=True,
        preexec_fn=run.join,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@needs_cgroup
def test_memory_no_process_maps_is_held_at_the_cap_by_the_kernel():
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is not installed")
    run = RunCgroup.make(RunLimits(memory_cap_bytes=100 * MiB, cgroup_headroom_bytes=50 * MiB))
    assert run is not None
    try:
        # a tmpfs in a mount namespace of its own: no process maps its pages, no folder of the run holds them
        process = subprocess.Popen(
            [
                "unshare",
                "-m",
                "sh",
                "-c",
                "mount -t tmpfs none /mnt && dd if=/dev/zero of=/mnt/fill bs=1M count=400 && echo wrote all",
            ],
            preexec_fn=run.join,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output, _ = process.communicate(timeout=60)
        assert "wrote all" not in output
        over = run.over()
        assert over is not None and over.startswith("memory, by the kernel's count") and "limit of 150 MiB" in over
    finally:
        run.close()


@needs_cgroup
def test_a_fork_past_the_thread_cap_is_refused_and_said():
    run = RunCgroup.make(RunLimits(task_cap=20))
    assert run is not None
    try:
        process = _in_group(
            run,
            """
            import os, time
            refused = 0
            for _ in range(40):
                try:
                    if os.fork() == 0:
                        time.sleep(5)
                        os._exit(0)
                except OSError:
                    refused += 1
            print("refused", refused)
        """,
        )
        output, _ = process.communicate(timeout=30)
        assert "refused 21" in output  # 20 tasks: the parent and 19 children
        assert "refused to start more than the grader's cap of 20 threads" in (run.over() or "")
    finally:
        run.close()


@needs_cgroup
def test_no_member_outlives_the_run_and_the_group_is_removed():
    run = RunCgroup.make(RunLimits())
    assert run is not None
    process = _in_group(
        run,
        """
        import os, time
        if os.fork() == 0:          # a daemon: its own session, its parent gone
            os.setsid()
            if os.fork() == 0:
                time.sleep(60)
            os._exit(0)
        time.sleep(1)
    """,
    )
    process.wait(timeout=30)  # (the daemon still holds the output pipe: not read)
    daemons = run.members()
    assert set(run.folders) >= {"memory", "pids", *(["cpu"] if "cpu" in _groups else [])}  # cpu: shared equally
    assert daemons, "the daemon should still be a member of the run's group"
    run.close()
    time.sleep(0.2)
    assert not any(
        os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z" for pid in daemons
    )
    assert not any(folder.exists() for folder in run.folders.values())


FILLS_A_TMPFS = '''
"""Demo lab A: add fills a tmpfs it mounts in a namespace of its own (memory no process maps)."""
import subprocess
import time


def add(a, b):
    subprocess.run(["unshare", "-Urm", "sh", "-c",
                    "mount -t tmpfs none /tmp && dd if=/dev/zero of=/tmp/fill bs=1M count=400 && sleep 20"])
    time.sleep(20)
    return a + b


def mean(values):
    return sum(values) / len(values)


def clamp(x, low, high):
    return min(max(x, low), high)


def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
'''


@needs_cgroup
def test_a_submission_filling_memory_the_watch_cannot_see_loses_that_test_alone(demo_setup, tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is not installed")
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("this machine allows no user namespaces")
    submission = starter_copy(tmp_path / "submission")
    (submission / "labA_arith" / "arith.py").write_text(FILLS_A_TMPFS)
    limits = replace(demo_setup.options.limits, memory_cap_bytes=100 * MiB, cgroup_headroom_bytes=100 * MiB)
    setup = replace(demo_setup, options=replace(demo_setup.options, limits=limits))
    result = grade_submission(submission, tmp_path / "graded", setup)
    lab = result.lab("labA")
    outcomes = {test.name: test for test in lab.tests if not test.heldout}
    assert lab.status == "graded", lab.reason
    assert outcomes["test_add"].outcome == "crashed" and "by the kernel's count" in outcomes["test_add"].message
    assert outcomes["test_clamp"].outcome == "passed"
    run = json.loads((tmp_path / "graded" / RAW_DIR / "labA" / RUN_FILE).read_text())
    assert run["peak_use"]["cgroup_memory_bytes"] > 100 * MiB  # read before the group is removed
