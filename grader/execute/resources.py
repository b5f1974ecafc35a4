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
- ``RLIMIT_NPROC`` (only when the grader is root: graded code then runs as a host uid of its own,
  :func:`grader.execute.isolation.fresh_graded_uid`): a backstop against a fork bomb faster than the
  watch (:data:`NPROC_BACKSTOP` tasks, threads included). The kernel counts it per uid, so it counts
  this process's tasks alone. Under a user namespace graded code runs as the grader's own user, whose
  other programs this limit would count, so there the watch alone counts processes.

**The watch** (:class:`ResourceWatch`, a thread of the supervisor's while the process runs) measures
what the kernel limits cannot:

- **memory**: the private memory of every process of the run together, proportionally (a page that
  a ``fork`` shares between N processes counts 1/N in each: ``Pss_Anon`` + ``Pss_Shmem``), plus every
  ``memfd`` they hold open; not the libraries' pages, which are shared with every other Python and
  can be dropped. The cheap upper bound (``RssAnon`` + ``RssShmem``) is read every poll, the
  proportional figure only when the bound is over the cap, so a correct submission that forks a
  pool of workers is never killed for pages its workers share;
- **processes** and **threads**: how many the run has (a process belongs to the run when it descends
  from the started command or is in its session: a daemon that left its parent still counts);
- **disk**: the blocks allocated in the process's writable folders (its home, caches, report folder,
  ``/tmp`` and ``/dev/shm``, which are all on disk: :class:`~grader.execute.isolation.View`), links
  not followed, plus files it deleted while holding them open or mapped (:func:`held_deleted_disk_bytes`:
  a file mapped, closed and unlinked is in no folder and no descriptor, yet keeps its blocks until it
  is unmapped). What the walk cannot count is over the cap: a folder it cannot read, a path longer
  than ``PATH_MAX``, more than ``files_cap`` entries.

The run's processes are measured every :data:`FAST_POLL_S` seconds, the host's process table read
every :data:`SCAN_POLL_S` (to find new ones), the disk every :data:`DISK_POLL_S`; the caps are
``RunLimits.memory_cap_bytes``, ``process_cap``, ``task_cap``, ``disk_cap_bytes`` and ``files_cap``
(``grader run --memory-cap``...). A run over a cap is killed (its whole group) like a test over its
time limit: the test running then scores 0 with a reason naming the resource, the amount and the
cap, and pytest goes on with the tests not yet run (:mod:`grader.execute.supervisor`). The peaks are
recorded in ``run.json`` (``peak_use``) so an instructor can see how far a correct submission stays
from every cap.

Where the grader may make cgroups (root, cgroup v1), each run also has a memory and pids cgroup
(:mod:`grader.execute.cgroup`): the kernel then holds the caps below the watch, and what the watch
cannot see is charged there. Without one, what the watch does not guarantee:

- between two polls a process can overshoot a cap by what it can allocate or write in that time (at
  most ``RLIMIT_DATA`` per process on the CPU; one file of ``RLIMIT_FSIZE``), and a process started
  and finished between two scans of the process table is not seen;
- memory no process maps or holds a descriptor to is not counted: System V shared memory (it dies
  with the sandbox's IPC namespace), a ``tmpfs`` mounted in a user namespace the code makes for
  itself, pipe and socket buffers.
"""

from __future__ import annotations

import os
import resource
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.execute.limits import RunLimits, amount

if TYPE_CHECKING:
    from grader.execute.cgroup import RunCgroup

#: Tasks (processes and threads) a graded process's own uid may have at once, when the grader is root.
NPROC_BACKSTOP = 4096
#: How often the watch measures the run's processes' memory and threads, reads the host's process
#: table (to find the run's new processes), and walks the disk (seconds).
FAST_POLL_S, SCAN_POLL_S, DISK_POLL_S = 0.25, 1.0, 2.0
#: How often proportional memory is measured while the cheap bound is over the cap (it walks page tables).
CONFIRM_POLL_S = 1.0


def kernel_limits(limits: RunLimits, *, gpu_off: bool, uid_of_its_own: bool) -> dict[int, int]:
    """The ``setrlimit`` limits of a graded process (resource -> soft and hard value): see the docstring."""
    kernel = {
        resource.RLIMIT_NOFILE: limits.open_files_cap,
        resource.RLIMIT_FSIZE: limits.file_size_cap_bytes,
        resource.RLIMIT_CORE: 0,
    }
    if gpu_off:
        kernel[resource.RLIMIT_DATA] = limits.memory_cap_bytes
    if uid_of_its_own:
        kernel[resource.RLIMIT_NPROC] = NPROC_BACKSTOP
    return kernel


def cuda_hidden(gpu: str) -> bool:
    """Whether graded code cannot reach CUDA: ``--gpu off``, or no NVIDIA device on this machine."""
    return gpu == "off" or not any(Path("/dev").glob("nvidia[0-9]*"))


def limit_setter(limits: dict[int, int], cgroup: RunCgroup | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` that sets ``limits`` in the child (a limit already lower stays as it is), makes it
    the OOM killer's first choice (``oom_score_adj`` 1000: under a limit that also holds the grader, such
    as a Slurm job's, the graded process goes first) and puts it in ``cgroup``, if one is given."""

    def set_limits() -> None:
        for kind, value in limits.items():
            soft, hard = resource.getrlimit(kind)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(kind, (value, value))
        try:  # the first process the kernel's OOM killer picks, never the grader
            with open("/proc/self/oom_score_adj", "w", encoding="ascii") as handle:
                handle.write("1000")
        except OSError:
            pass
        if cgroup is not None:
            cgroup.join()

    return set_limits


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3 onwards of ``/proc/PID/stat`` (proc(5)), None when the process has ended."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()  # after "pid (command) "; the command may hold spaces


def run_processes(root: int) -> list[int]:
    """The processes of the run started as ``root``: its descendants and every process in its session."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                table[int(entry.name)] = (int(fields[1]), int(fields[3]))  # parent, session
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
        fields = _stat_fields(pid)
        if fields is not None:  # (one that ended meanwhile: its time is now its parent's)
            ticks += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime: fields 14-17
    return ticks / os.sysconf("SC_CLK_TCK")


def task_count(pids: Iterable[int]) -> int:
    """Threads of ``pids`` together (a process is one task per thread)."""
    return sum(int(fields[17]) for fields in map(_stat_fields, pids) if fields is not None)  # num_threads: field 20


def _kib_fields(text: str, names: tuple[str, ...]) -> int:
    total = 0
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in names and value.split() and value.split()[0].isdigit():
            total += int(value.split()[0]) * 1024
    return total


def resident_private_bytes(pids: Iterable[int]) -> int:
    """``RssAnon`` + ``RssShmem`` of ``pids`` together: cheap, and never less than :func:`private_memory_bytes`
    (a page shared by several processes, after a ``fork``, is counted once per process here)."""
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/status").read_text(encoding="utf-8", errors="replace")
        except OSError:  # the process has ended
            continue
        total += _kib_fields(text, ("RssAnon", "RssShmem"))
    return total


def private_memory_bytes(pids: Iterable[int]) -> int:
    """The proportional private memory (``Pss_Anon`` + ``Pss_Shmem`` of ``/proc/PID/smaps_rollup``) of
    ``pids``: a page shared by N of them counts 1/N in each, so the sum is what they hold together.
    Reading it walks a process's page tables (~25 ms for a process that imported torch)."""
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        total += _kib_fields(text, ("Pss_Anon", "Pss_Shmem"))
    return total


#: How ``/proc`` names a file that has been unlinked (``readlink`` of a descriptor, a line of ``maps``).
DELETED = " (deleted)"
#: Deleted "files" that are memory, not disk: memfds, System V segments, shared anonymous memory
#: (counted as memory: ``RssShmem``, :func:`open_deleted_bytes`).
MEMORY_FILES = ("/memfd:", "/SYSV", "/dev/zero")

FileKey = tuple[int, int]  # (device, inode)


def open_deleted_files(pids: Iterable[int]) -> dict[FileKey, tuple[bool, int]]:
    """The files ``pids`` hold that exist only through an open descriptor: (device, inode) -> (whether it is
    memory, bytes allocated). A ``memfd`` (``/memfd:NAME (deleted)``) is memory no process maps yet; a
    file deleted while open still fills the disk."""
    found: dict[FileKey, tuple[bool, int]] = {}
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in descriptors:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
                if not target.endswith(DELETED):
                    continue
                info = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found[(info.st_dev, info.st_ino)] = (target.startswith("/memfd:"), info.st_blocks * 512)
    return found


def open_deleted_bytes(pids: Iterable[int]) -> tuple[int, int]:
    """What ``pids`` hold in files that exist only through an open descriptor (:func:`open_deleted_files`):
    ``(memory, disk)`` in bytes, each file counted once."""
    held = open_deleted_files(pids).values()
    return sum(size for memory, size in held if memory), sum(size for memory, size in held if not memory)


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def mapped_deleted_files(pids: Iterable[int], roots: Iterable[str], devices: set[int]) -> dict[FileKey, int]:
    """The files ``pids`` map that have been unlinked: (device, inode) -> bytes.

    Read from each process's ``/proc/PID/maps`` (one line per mapping: range, permissions, offset,
    device, inode, path; the path as the process names it, ``... (deleted)`` once unlinked). A mapping
    counts when its file lies under ``roots`` (the run's writable folders as the process sees them) or
    is mapped shared and writable on one of ``devices`` (those folders' filesystems): not the memory
    "files" of :data:`MEMORY_FILES`, nor a library of the system replaced while a process ran it.
    Its size is the file's allocated blocks, from ``os.stat`` of ``/proc/PID/map_files/RANGE`` (which
    only root may follow); failing that, the length of the ranges mapped (a file mapped in part then
    counts only that part).
    """
    roots = tuple(roots)
    exact: dict[FileKey, int] = {}
    mapped: dict[FileKey, int] = {}
    for pid in pids:
        try:
            data = Path(f"/proc/{pid}/maps").read_bytes()
        except OSError:
            continue
        if DELETED.encode() not in data:  # the usual case: one search of the bytes, nothing decoded or split
            continue
        for line in data.decode("utf-8", errors="replace").splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or not fields[5].endswith(DELETED):
                continue
            span, permissions, _offset, device, inode, path = fields
            path = path[: -len(DELETED)]
            if path.startswith(MEMORY_FILES) or not path.startswith("/") or inode == "0":
                continue
            major, minor = (int(part, 16) for part in device.split(":"))
            shared_writable = permissions[1] == "w" and permissions[3] == "s"
            if not (_under(path, roots) or (shared_writable and os.makedev(major, minor) in devices)):
                continue
            try:
                info = os.stat(f"/proc/{pid}/map_files/{span}")
            except OSError:  # not root: the range mapped
                start, end = (int(part, 16) for part in span.split("-"))
                key = (os.makedev(major, minor), int(inode))
                mapped[key] = mapped.get(key, 0) + end - start
                continue
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:
                exact[(info.st_dev, info.st_ino)] = info.st_blocks * 512
    return {**mapped, **exact}


def held_deleted_disk_bytes(pids: Iterable[int], roots: Iterable[str], devices: set[int]) -> int:
    """Disk held by files ``pids`` deleted but still hold, open (:func:`open_deleted_files`) or mapped
    (:func:`mapped_deleted_files`), each file counted once."""
    pids = list(pids)
    files = {key: size for key, (memory, size) in open_deleted_files(pids).items() if not memory}
    for key, size in mapped_deleted_files(pids, roots, devices).items():
        files.setdefault(key, size)
    return sum(files.values())


@dataclass(frozen=True)
class DiskUse:
    """What a run's folders hold: bytes allocated, entries, and why the walk could not count them all."""

    bytes: int
    entries: int
    problem: str = ""


def disk_use(folders: Iterable[Path], max_entries: int) -> DiskUse:
    """Blocks and entries under ``folders``, links not followed, without recursion.

    Whatever the walk cannot count is the submission's doing and over the cap, not free: a folder it
    cannot read (graded code made it ``000``), a path too long to name (a tree deeper than ``PATH_MAX``),
    more than ``max_entries`` entries (the walk stops there, so it is never slow).
    """
    total, entries = 0, 0
    todo = [str(folder) for folder in folders]
    while todo:
        path = todo.pop()
        try:
            with os.scandir(path) as listing:
                for entry in listing:
                    entries += 1
                    if entries > max_entries:
                        return DiskUse(total, entries, f"more than {max_entries} files and folders")
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        todo.append(entry.path)
        except FileNotFoundError:  # removed meanwhile
            continue
        except OSError as error:
            return DiskUse(total, entries, f"a folder the grader cannot measure ({error.strerror})")
    return DiskUse(total, entries)


def disk_bytes(folders: Iterable[Path]) -> int:
    """Blocks allocated under ``folders`` (see :func:`disk_use`), in bytes."""
    return disk_use(folders, max_entries=10**9).bytes


def over_cap(name: str, value: int, cap: int, unit: str) -> str:
    return f"{name}: {amount(value, unit)}, over the grader's cap of {amount(cap, unit)}"


class ResourceWatch:
    """Measures one run's memory, processes, threads and disk in a thread of its own (see the module
    docstring); :attr:`over` says, once a cap is passed, which one and by how much.

    Its own thread, so that a slow measurement (a folder of 100,000 files, a host with thousands of
    processes) never holds up the supervisor's time limits. What each poll costs is bounded: the host's
    process table is read every :data:`SCAN_POLL_S`, the run's own processes every :data:`FAST_POLL_S`,
    proportional memory (:func:`private_memory_bytes`, expensive) only when the cheap upper bound
    (:func:`resident_private_bytes`) is over the cap, and the disk walk stops at ``files_cap`` entries.
    The disk poll also reads every process's ``/proc/PID/maps`` (:func:`mapped_deleted_files`): about
    3 ms for a process that imported torch (550 mappings, the kernel's time), so 0.16 s every
    :data:`DISK_POLL_S` for a run of 50 such processes on a loaded 2-core machine (3 ms before it read them).

    Args:
        root: the pid of the started command (the sandbox, or pytest itself when unisolated).
        folders: the run's writable folders on the host.
        inside: other names the run's processes have for them (``/tmp``, ``/dev/shm``: the sandbox mounts
            its private folders there), for :func:`mapped_deleted_files`.
        limits: the caps (``memory_cap_bytes``, ``process_cap``, ``task_cap``, ``disk_cap_bytes``, ``files_cap``).
        cgroup: the run's cgroup (:mod:`grader.execute.cgroup`), if it has one: its members are the
            run's processes too (the supervisor reads the kernel's own verdicts from it).
    """

    def __init__(
        self,
        root: int,
        folders: tuple[Path, ...],
        limits: RunLimits,
        cgroup: RunCgroup | None = None,
        *,
        inside: tuple[Path, ...] = (),
    ) -> None:
        self.root, self.folders, self.limits, self.cgroup = root, folders, limits, cgroup
        self._roots = tuple(str(folder) for folder in (*folders, *inside))
        self._devices = {folder.stat().st_dev for folder in folders if folder.exists()}
        self.over = ""
        self.peak_memory_bytes = self.peak_processes = self.peak_disk_bytes = 0
        self._pids: list[int] = [root]
        self._next = {"scan": 0.0, "fast": 0.0, "disk": 0.0, "confirm": 0.0}
        self._confirmed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "ResourceWatch":
        """Poll in a daemon thread until :meth:`stop` (or until a cap is passed)."""
        self._thread = threading.Thread(target=self._poll_until_over, daemon=True, name=f"resource-watch-{self.root}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _poll_until_over(self) -> None:
        while not self._stop.is_set() and not self.over:
            over = self.check(time.monotonic())
            if over:
                self.over = over
            self._stop.wait(FAST_POLL_S / 2)

    def check(self, now: float) -> str | None:
        """Measure what is due at ``now`` (monotonic seconds); the first cap passed, in words, or None."""
        limits = self.limits
        if now >= self._next["scan"]:
            self._next["scan"] = now + SCAN_POLL_S
            members = self.cgroup.members() if self.cgroup else []
            self._pids = sorted(set(run_processes(self.root)).union(members))
            self.peak_processes = max(self.peak_processes, len(self._pids))
            if len(self._pids) > limits.process_cap:
                return over_cap("processes at once", len(self._pids), limits.process_cap, "processes")
        if now >= self._next["fast"]:
            self._next["fast"] = now + FAST_POLL_S
            tasks = task_count(self._pids)
            if tasks > limits.task_cap:
                return over_cap("threads at once", tasks, limits.task_cap, "threads")
            held_memory, _ = open_deleted_bytes(self._pids)
            memory = resident_private_bytes(self._pids) + held_memory
            if memory > limits.memory_cap_bytes:  # an upper bound: confirm, shared pages shared out
                if now >= self._next["confirm"]:
                    self._next["confirm"] = now + CONFIRM_POLL_S
                    self._confirmed = private_memory_bytes(self._pids) + held_memory
                memory = self._confirmed
            self.peak_memory_bytes = max(self.peak_memory_bytes, memory)
            if memory > limits.memory_cap_bytes:
                return over_cap("private memory", memory, limits.memory_cap_bytes, "bytes")
        if now >= self._next["disk"]:
            self._next["disk"] = now + DISK_POLL_S
            use = disk_use(self.folders, limits.files_cap)
            used = use.bytes + held_deleted_disk_bytes(self._pids, self._roots, self._devices)
            self.peak_disk_bytes = max(self.peak_disk_bytes, used)
            if use.problem:
                return f"disk space in its folders: {use.problem}"
            if used > limits.disk_cap_bytes:
                return over_cap("disk space in its folders", used, limits.disk_cap_bytes, "bytes")
        return None

    def peaks(self) -> dict[str, Any]:
        """The most the run used of each measured resource (``run.json``'s ``peak_use``)."""
        peaks = {
            "memory_bytes": self.peak_memory_bytes,
            "processes": self.peak_processes,
            "disk_bytes": self.peak_disk_bytes,
        }
        if self.cgroup:
            peaks["cgroup_memory_bytes"] = self.cgroup.peak_memory_bytes()
        return peaks
