"""Graded by root, each graded process is a host uid of its own: what the kernel counts per uid is not shared.

The kernel keeps some counts per uid, outside every namespace: inotify instances (at most
``fs.inotify.max_user_instances``, 128 by default), POSIX message-queue bytes, pipe buffers, tasks. Under one
shared uid (every graded process the host's ``nobody``), a run in a batch could use them all up, and its
neighbour, started under the same uid, would fail for no fault of its own. The control below shows it.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from grader.execute import isolation
from grader.execute.isolation import GRADED_UIDS, NOBODY, Bubblewrap, View
from grader.tests.conftest import needs_bubblewrap

pytestmark = [
    needs_bubblewrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="graded by root, each graded process is a host uid of its own"),
]

INSTANCES = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())

#: Opens ``count`` inotify instances (argv[1]); says how many it got, then holds them until stdin closes.
HOLD_INOTIFY = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
got = 0
for _ in range(int(sys.argv[1])):
    if libc.inotify_init() < 0:
        print("failed", os.strerror(ctypes.get_errno()), flush=True)
        break
    got += 1
print("got", got, os.getuid(), flush=True)
sys.stdin.read()
"""


def _launch(code: str, *args: str) -> subprocess.Popen:
    """``python -c code args`` under a new Bubblewrap, as graded code runs (its output a pipe, its stdin too)."""
    launch = Bubblewrap(sys.executable, Path("/nonexistent-course")).command(
        [sys.executable, "-c", code, *args], {"PATH": "/usr/bin"}, View((), (), (), Path("/"))
    )
    try:
        return subprocess.Popen(
            launch.argv,
            env=launch.env,
            pass_fds=launch.pass_fds,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
    finally:
        launch.close()


def _neighbours() -> tuple[str, str]:
    """What a run holding every inotify instance its uid may have, then a run beside it, each report."""
    hog = _launch(HOLD_INOTIFY, str(INSTANCES))
    try:
        first = hog.stdout.readline().strip()
        neighbour = _launch(HOLD_INOTIFY, "1")
        second, _ = neighbour.communicate("", timeout=60)
    finally:
        hog.communicate("", timeout=60)
    return first, second.strip()


def test_each_graded_process_is_a_uid_of_its_own_naming_no_account():
    sandbox = Bubblewrap(sys.executable, Path("/nonexistent-course"))
    uids = [sandbox.graded_uid(View((), (), (), Path("/"), Path(f"/private-{n}"))) for n in range(20)]
    assert len(set(uids)) == 20 and all(uid in GRADED_UIDS for uid in uids), uids
    for uid in uids:
        with pytest.raises(KeyError):
            pwd.getpwuid(uid)


def test_a_run_that_uses_up_its_uids_inotify_instances_leaves_its_neighbours_theirs():
    first, second = _neighbours()
    hog_uid, neighbour_uid = int(first.split()[2]), int(second.split()[2])
    assert first.startswith(f"got {INSTANCES} "), first
    assert second.startswith("got 1 "), f"the neighbour got its inotify instance: {second}"
    assert hog_uid != neighbour_uid and {hog_uid, neighbour_uid} <= set(GRADED_UIDS)


def test_under_one_shared_uid_the_neighbour_finds_none_left(monkeypatch):
    """The control: every graded process the host's nobody (as the grader once ran them)."""
    monkeypatch.setattr(isolation, "fresh_graded_uid", lambda: NOBODY)
    first, second = _neighbours()
    assert first.startswith(f"got {INSTANCES} {NOBODY}"), first
    assert second.startswith("failed Too many open files"), f"the neighbour found its uid's instances used up: {second}"
