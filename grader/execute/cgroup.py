"""A memory and pids cgroup per graded process tree: the caps the kernel keeps, not the watch.

The watch (:mod:`grader.execute.resources`) measures what it can see: the memory the run's processes
map, the files in its folders, the processes it can find. Some memory no process maps: a ``tmpfs``
mounted in a user namespace the code makes for itself, System V shared memory, pipe buffers. Between
two polls a process can overshoot; a daemon that leaves its session and parent can run on after the
run. A control group closes all of these by construction: the kernel charges every page a member
allocates (whatever holds it) to the group, refuses a fork past its task limit, and lists every member,
wherever it moved in the process tree.

So, where the grader may make one, every graded process runs in a cgroup of its own:

- **memory**: ``memory.limit_in_bytes`` is the run's memory cap plus ``RunLimits.cgroup_headroom_bytes``
  (1 GiB: the group also counts page cache and the kernel's own memory, which the watch does not), swap included where
  the kernel counts it. The watch still fires first for memory it sees, with its precise figure; past
  the group's limit the kernel's OOM killer ends a member, and the run is reported over its memory
  cap ("kernel's count"), like the watch's verdict;
- **tasks**: ``pids.max`` is the run's thread cap (``RunLimits.task_cap``); a fork past it fails in
  the graded code, and the run is reported over the cap;
- **no survivors**: when the run ends, every member left (whatever session or parent it has) is
  killed, and the group removed.

Which cgroups: version 1's ``memory`` and ``pids`` hierarchies, each group made under the grader's own
cgroup, which needs write access there (root, on a host or in a privileged container). Version 2 is not
used: a process may only join a v2 group whose parent has no members, so the grader would have to move
itself; on a v2 host give the whole grading a limit instead (``systemd-run --scope -p MemoryMax=16G
-p TasksMax=8192 python -m grader batch ...``). Where no cgroup can be made, :func:`cgroup_support`
says why and the watch and kernel limits alone bound the run.
"""

from __future__ import annotations

import itertools
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grader.execute.limits import RunLimits, amount

#: The controllers a run's group needs, and the one it uses where mounted: ``cpu``, whose groups
#: share the CPU equally (``cpu.shares``), so a run that starts 200 busy processes gets no more of
#: the machine than its neighbour in a batch.
CONTROLLERS = ("memory", "pids")
OPTIONAL = ("cpu",)
#: How long closing a group waits for its killed members to be gone (seconds).
CLOSE_WAIT_S = 10.0

_names = itertools.count()


def _own_groups(mountinfo: str, own_cgroups: str) -> dict[str, Path]:
    """Each v1 controller of :data:`CONTROLLERS` -> the folder of this process's own group in it.

    ``mountinfo`` is ``/proc/self/mountinfo`` (a mount's root, its mount point, its super options,
    which name the controllers) and ``own_cgroups`` ``/proc/self/cgroup`` (``ID:controllers:path``).
    """
    paths = {}
    for line in own_cgroups.splitlines():
        _id, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            paths[controller] = path
    found = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line:
            continue
        before, after = line.split(" - ", 1)
        fstype, _source, options = (after.split() + ["", ""])[:3]
        if fstype != "cgroup":
            continue
        root, mount_point = fields[3], before.split()[4]
        for controller in set(options.split(",")) & set(CONTROLLERS + OPTIONAL):
            path = paths.get(controller)
            if path is None or not (path + "/").startswith(root.rstrip("/") + "/"):
                continue
            found[controller] = Path(mount_point) / path[len(root.rstrip("/")) :].lstrip("/")
    return found


def cgroup_support() -> tuple[dict[str, Path], str]:
    """The grader's own group of each controller, and "" when run groups can be made under them; else
    an empty dict and the reason, in words."""
    try:
        groups = _own_groups(Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())
    except OSError as error:
        return {}, f"the process's cgroups cannot be read ({error.strerror})"
    missing = [name for name in CONTROLLERS if name not in groups]
    if missing:
        return {}, f"no cgroup v1 {' or '.join(missing)} hierarchy is mounted"
    for name in CONTROLLERS:
        if not os.access(groups[name], os.W_OK):
            return {}, f"the grader may not make cgroups in {groups[name]} (not root)"
    return {name: folder for name, folder in groups.items() if os.access(folder, os.W_OK)}, ""


def describe_support() -> str:
    """One line for the grader's output: whether graded processes get a cgroup, and if not, why."""
    _groups, problem = cgroup_support()
    if problem:
        return f"limits: kernel limits and the resource watch (no cgroup: {problem})"
    return "limits: a memory and pids cgroup (v1) per graded process, kernel limits and the resource watch"


@dataclass
class RunCgroup:
    """One graded run's groups (controller -> folder); make it with :meth:`make`, close it with :meth:`close`."""

    folders: dict[str, Path]
    memory_limit_bytes: int
    task_limit: int

    @classmethod
    def make(cls, limits: RunLimits) -> RunCgroup | None:
        """A fresh group in each controller, with the run's limits set; None where none can be made."""
        groups, problem = cgroup_support()
        if problem:
            return None
        name = f"graded-{os.getpid()}-{next(_names)}-{secrets.token_hex(3)}"
        run = cls({}, limits.memory_cap_bytes + limits.cgroup_headroom_bytes, limits.task_cap)
        try:
            for controller, parent in groups.items():
                folder = parent / name
                folder.mkdir()
                run.folders[controller] = folder
            memory = run.folders["memory"]
            (memory / "memory.limit_in_bytes").write_text(str(run.memory_limit_bytes))
            swap = memory / "memory.memsw.limit_in_bytes"  # only where the kernel counts swap
            if swap.exists():
                swap.write_text(str(run.memory_limit_bytes))
            (run.folders["pids"] / "pids.max").write_text(str(run.task_limit))
        except OSError as error:
            run.close()
            print(
                f"note: no cgroup for this graded process ({error}): the resource watch and kernel limits "
                "alone hold it",
                file=sys.stderr,
            )
            return None
        return run

    def join(self) -> None:
        """Put the calling process in the run's groups (a ``preexec_fn``: it runs in the child before it
        starts the graded command, so everything that command starts is a member from its first instruction)."""
        pid = str(os.getpid())
        for folder in self.folders.values():
            (folder / "cgroup.procs").write_text(pid)

    def members(self) -> list[int]:
        """Every process in the run's groups, wherever it is in the process tree."""
        found: set[int] = set()
        for folder in self.folders.values():
            try:
                found.update(int(line) for line in (folder / "cgroup.procs").read_text().split())
            except OSError:
                continue
        return sorted(found)

    def _read(self, controller: str, name: str) -> str:
        try:
            return (self.folders[controller] / name).read_text()
        except (OSError, KeyError):
            return ""

    def _counter(self, controller: str, name: str, key: str) -> int:
        for line in self._read(controller, name).splitlines():
            field, _, value = line.partition(" ")
            if field == key and value.strip().isdigit():
                return int(value)
        return 0

    def over(self) -> str | None:
        """The cap the kernel held the run at, in words (the OOM killer ended a member; a fork was
        refused), or None."""
        if self._counter("memory", "memory.oom_control", "oom_kill"):
            peak = self.peak_memory_bytes()
            if peak >= 0.95 * self.memory_limit_bytes:
                held = f"the run reached its cgroup's limit of {amount(self.memory_limit_bytes, 'bytes')}"
            else:  # a limit around the grader was hit first: a Slurm job's --mem, the machine's memory
                held = (
                    f"the run held {amount(peak, 'bytes')} at most, under a memory limit around the grader "
                    "(a Slurm job's --mem, or the machine's memory)"
                )
            return (
                f"memory, by the kernel's count (page cache and kernel memory included): {held}, and the "
                "kernel ended one of its processes"
            )
        if self._counter("pids", "pids.events", "max"):
            return (
                f"threads at once: the kernel refused to start more than the grader's cap of {self.task_limit} threads"
            )
        return None

    def peak_memory_bytes(self) -> int:
        """The most memory the group was charged for at once (page cache included)."""
        value = self._read("memory", "memory.max_usage_in_bytes").strip()
        return int(value) if value.isdigit() else 0

    def close(self) -> None:
        """Kill every member left and remove the groups (a group that will not go is left, empty or not)."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        while (members := self.members()) and time.monotonic() < deadline:
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.05)
        for controller, folder in self.folders.items():
            try:
                if controller == "memory":  # charges left by page cache: else the group lingers, dying
                    (folder / "memory.force_empty").write_text("0")
            except OSError:
                pass
            try:
                folder.rmdir()
            except OSError:
                pass
