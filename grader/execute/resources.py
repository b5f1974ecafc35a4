"""Memory, processes, open files and disk: how much of the machine one graded process may take.

Time is bounded by :mod:`grader.execute.limits`; isolation (:mod:`grader.execute.isolation`) bounds what a
graded process may *see*. Neither stops a submission that allocates 20 GB, starts a thousand processes,
opens every file it can or fills the disk, on the instructor's machine or a shared node, where the next
student (or someone else's job) pays for it. So every graded process has limits of two kinds:

**Kernel limits** (``setrlimit``, set in the child before it starts the sandbox, inherited by everything
it starts, and enforced by the kernel on the spot, without polling):

- ``RLIMIT_NOFILE``: open files per process (``RunLimits.open_files_cap``);
- ``RLIMIT_FSIZE``: the largest file a process may write (``RunLimits.file_size_cap_bytes``);
- ``RLIMIT_CORE`` 0: no core dumps;
- ``RLIMIT_DATA`` (only when the GPU is off): one process's writable memory (``RunLimits.memory_cap_bytes``),
  so an allocation past it fails in the test (``MemoryError``, a failed test) before it is made. CUDA
  reserves large address ranges, so with a GPU only the watch below bounds memory;
- ``RLIMIT_NPROC`` (only when the grader is root and graded code runs as the host's ``nobody``): a
  backstop against a fork bomb faster than the watch (:data:`NPROC_BACKSTOP` tasks, threads included,
  of that user). Under a user namespace graded code runs as the grader's own user, whose other
  programs this limit would count, so there the watch alone counts processes.

**The watch** (:class:`ResourceWatch`, polled by the supervisor while the process runs) measures what
the kernel limits cannot:

- **memory**: the private memory of every process of the run together (``RssAnon`` + ``RssShmem``
  from ``/proc/PID/status``: the heap, tensors, shared memory; not the libraries' pages, which are
  shared with every other Python and can be dropped);
- **processes**: how many processes the run has (a process belongs to the run when it descends from
  the started command or is in its session: a daemon that left its parent still counts);
- **disk**: the blocks allocated in the process's writable folders (its home, caches, report folder,
  ``/tmp`` and ``/dev/shm``, which are all on disk: :class:`~grader.execute.isolation.View`), links
  not followed.

Memory and processes are measured every :data:`FAST_POLL_S` seconds, disk every :data:`DISK_POLL_S`; the caps are
``RunLimits.memory_cap_bytes``, ``process_cap`` and ``disk_cap_bytes`` (``grader run --memory-cap``...). A run over
a cap is killed (its whole group) like a test over its time limit: the test running then scores 0 with
a reason naming the resource, the amount and the cap, and pytest goes on with the tests not yet run
(:mod:`grader.execute.supervisor`). The peaks are recorded in ``run.json`` (``peak_use``) so an
instructor can see how far a correct submission stays from every cap.

What the watch does not guarantee: between two polls a process can overshoot a cap by what it can
allocate or write in that time (at most ``RLIMIT_DATA`` per process on the CPU; one file of
``RLIMIT_FSIZE``). The caps are set well below the machine's size for that reason.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.execute.limits import GiB, RunLimits

#: Tasks (processes and threads) the host's graded user may have at once, when the grader is root.
NPROC_BACKSTOP = 4096
#: How often the watch measures memory and processes (seconds), and disk.
FAST_POLL_S, DISK_POLL_S = 0.25, 2.0


def kernel_limits(limits: RunLimits, *, gpu_off: bool, graded_user_is_nobody: bool) -> dict[int, int]:
    """The ``setrlimit`` limits of a graded process (resource -> soft and hard value): see the docstring."""
    kernel = {resource.RLIMIT_NOFILE: limits.open_files_cap, resource.RLIMIT_FSIZE: limits.file_size_cap_bytes,
              resource.RLIMIT_CORE: 0}
    if gpu_off:
        kernel[resource.RLIMIT_DATA] = limits.memory_cap_bytes
    if graded_user_is_nobody:
        kernel[resource.RLIMIT_NPROC] = NPROC_BACKSTOP
    return kernel


def cuda_hidden(gpu: str) -> bool:
    """Whether graded code cannot reach CUDA: ``--gpu off``, or no NVIDIA device on this machine."""
    return gpu == "off" or not any(Path("/dev").glob("nvidia[0-9]*"))


def limit_setter(limits: dict[int, int]) -> Callable[[], None]:
    """A ``preexec_fn`` that sets ``limits`` in the child (a limit already lower stays as it is)."""

    def set_limits() -> None:
        for kind, value in limits.items():
            soft, hard = resource.getrlimit(kind)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(kind, (value, value))

    return set_limits


def _status_fields(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="utf-8", errors="replace")
    except OSError:  # the process has ended
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _stat_fields(pid: int) -> tuple[int, int] | None:
    """``(parent pid, session id)`` of a process, None when it has ended."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # after "pid (command) "; the command may hold spaces
    return int(fields[1]), int(fields[3])


def run_processes(root: int) -> list[int]:
    """The processes of the run started as ``root``: its descendants and every process in its session."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                table[int(entry.name)] = fields
    children: dict[int, list[int]] = {}
    for pid, (parent, _session) in table.items():
        children.setdefault(parent, []).append(pid)
    found = {pid for pid, (_parent, session) in table.items() if session == root or pid == root}
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return sorted(found)


def cpu_seconds(pids: Iterable[int]) -> float:
    """The CPU time (user + system) ``pids`` have used, each with its children that have ended and been
    waited for: over every live process of a tree, the whole tree's CPU time so far."""
    ticks = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
        except OSError:  # ended meanwhile: its time is now its parent's
            continue
        fields = text[text.rfind(")") + 2:].split()  # fields 3.. of proc(5): utime, stime, cutime, cstime are 14-17
        ticks += sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def private_memory_bytes(pids: Iterable[int]) -> int:
    """The private resident memory (``RssAnon`` + ``RssShmem``) of ``pids`` together, in bytes."""
    total = 0
    for pid in pids:
        fields = _status_fields(pid)
        for name in ("RssAnon", "RssShmem"):
            value = fields.get(name, "0 kB").split()
            total += int(value[0]) * 1024 if value and value[0].isdigit() else 0
    return total


def disk_bytes(folders: Iterable[Path]) -> int:
    """Blocks allocated under ``folders`` (what the disk holds for them), links not followed, in bytes."""
    total = 0
    todo = [str(folder) for folder in folders]
    while todo:
        path = todo.pop()
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += info.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:  # removed meanwhile, or not readable: counted as nothing
            continue
    return total


def _amount(value: int, unit: str) -> str:
    if unit != "bytes":
        return f"{value} {unit}"
    return f"{value / GiB:.1f} GiB" if value >= GiB else f"{value / 1024**2:.0f} MiB"


@dataclass
class ResourceWatch:
    """Measures one run's memory, processes and disk (see the module docstring) and says when a cap is passed.

    Args:
        root: the pid of the started command (the sandbox, or pytest itself when unisolated).
        folders: the run's writable folders on the host.
        limits: the caps (``memory_cap_bytes``, ``process_cap``, ``disk_cap_bytes``).
    """

    root: int
    folders: tuple[Path, ...]
    limits: RunLimits
    peak_memory_bytes: int = 0
    peak_processes: int = 0
    peak_disk_bytes: int = 0
    _next_fast: float = 0.0
    _next_disk: float = 0.0

    def check(self, now: float) -> str | None:
        """Measure what is due at ``now`` (monotonic seconds); the first cap passed, in words, or None."""
        if now >= self._next_fast:
            self._next_fast = now + FAST_POLL_S
            pids = run_processes(self.root)
            memory = private_memory_bytes(pids)
            self.peak_memory_bytes = max(self.peak_memory_bytes, memory)
            self.peak_processes = max(self.peak_processes, len(pids))
            if memory > self.limits.memory_cap_bytes:
                return self._over("memory", memory, self.limits.memory_cap_bytes, "bytes")
            if len(pids) > self.limits.process_cap:
                return self._over("processes", len(pids), self.limits.process_cap, "processes")
        if now >= self._next_disk:
            self._next_disk = now + DISK_POLL_S
            used = disk_bytes(self.folders)
            self.peak_disk_bytes = max(self.peak_disk_bytes, used)
            if used > self.limits.disk_cap_bytes:
                return self._over("disk", used, self.limits.disk_cap_bytes, "bytes")
        return None

    @staticmethod
    def _over(what: str, value: int, cap: int, unit: str) -> str:
        names = {"memory": "private memory", "processes": "processes at once", "disk": "disk space in its folders"}
        return f"{names[what]}: {_amount(value, unit)}, over the grader's cap of {_amount(cap, unit)}"

    def peaks(self) -> dict[str, Any]:
        """The most the run used of each measured resource (``run.json``'s ``peak_use``)."""
        return {"memory_bytes": self.peak_memory_bytes, "processes": self.peak_processes,
                "disk_bytes": self.peak_disk_bytes}
