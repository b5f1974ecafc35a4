"""What a graded process may see and reach: least privilege, configured here and nowhere else.

A graded pytest process runs a student's code with the grader's user. Left alone, that code could read
the reference solutions next to the grader, the held-out tests in its own sandbox, the grader's cache
and outputs, every environment variable, the network; and leave a daemon behind that rewrites results
after the run. So each process runs under `bubblewrap <https://github.com/containers/bubblewrap>`_
(``bwrap``, the sandbox Flatpak uses), which gives it:

- **its own mount view**, read-only, of exactly what it needs: the system (``/usr``, ``/etc``...), the
  grading interpreter and its packages, the grader's and the harness's installed packages (``grader``
  for the probe plugin, ``labkit``; their tests hidden), and the :class:`View` the supervisor names: the
  sandbox copy of the course (never ``solutions/``; held-out tests only in a held-out run), a writable
  folder for the JSON report and one for the submission's compiler caches. The rest of the machine (the
  instructor's repository, home, the rubric cache, other students, the grader's outputs) does not exist in
  it. ``/tmp`` is private;
- **its own PID namespace**, which dies with it: no process it starts outlives the run;
- **no network** (a namespace with loopback only), **no capabilities**, an unprivileged user, and a
  clean environment (:func:`grader.execute.command.pytest_env`);
- **no kernel keyring**: a seccomp filter (:mod:`grader.execute.seccomp`, handed to bubblewrap as a
  descriptor) makes ``add_key``, ``request_key`` and ``keyctl`` fail, so no text survives the run in the
  keyring the kernel keeps for its uid.

**Which user.** Started by a normal user, bubblewrap puts the process in a user namespace where it is
``nobody``: outside, it is that user (its files are theirs anyway). Started by **root** (a container's
default user, CI, a Slurm job) a user namespace would not help: the namespace's ``nobody`` is mapped onto
the user who created it, root, so graded code could read ``/etc/shadow`` and leave root-owned setuid
files. As root, bubblewrap therefore makes no user namespace (root does the mounts), and inside it
``setpriv`` (util-linux) turns the process into a host uid (and gid) **of its own**, drawn for that one
process from :data:`GRADED_UIDS` (a block no account uses: :func:`fresh_graded_uid`), before the graded
command starts: no supplementary groups, no capability (the bounding set emptied too), ``no_new_privs``
(no setuid program can give any back). What it must write (:attr:`View.writable`, its private folder) is
handed to that uid first (:func:`hand_over`); every mount is ``nosuid``.

Why a uid per process and not one shared ``nobody``: the kernel keeps state and counts per uid, outside
every namespace: a keyring that outlives every process, inotify instances and watches, POSIX message
queue bytes, pipe buffers, ``RLIMIT_NPROC``'s count of tasks. Under one shared uid, a held-out process
could leave text there for a later visible one, and one run in a batch could use up what its neighbour
starts with. Under a uid of its own, each graded process finds that state empty, and
``RLIMIT_NPROC`` counts its own tasks alone (:func:`grader.execute.resources.kernel_limits`).

:class:`Unisolated` runs the command as it is (its own process group only): for a student grading
their own copy on a laptop without bubblewrap, with no seccomp filter either (bubblewrap installs it;
the process is then the student's own user, whose keyring is theirs). An instructor's grading (a course
with solutions or held-out tests) refuses to run unisolated unless asked with ``--unsafe-no-sandbox``
(:func:`choose_isolation`).

What isolation does not do: the code under test shares its process with pytest and the grader's
probe, and can change either in memory. That is detected (canaries, the checked event stream), not
prevented: see :mod:`grader.execute.channel`.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grader
import labkit
from grader.execute.bwrap import WHEEL, BwrapProgram, candidates, system_program
from grader.execute.cgroup import describe_support
from grader.execute.preflight import GraderEnvironmentError
from grader.execute.seccomp import filter_descriptor, filter_problem

#: Folders every process needs (read-only): programs, libraries, configuration, the kernel's view.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/etc", "/opt", "/sys")
#: Mount points under which no parent folder is ever made (they are the host's own, read-only).
SYSTEM_MOUNTS = tuple(Path(name) for name in SYSTEM_PATHS)
#: The user a graded process runs as inside its namespace.
NOBODY = 65534
#: The host uids (and gids) graded processes started by root run as, one per process: a block far above
#: every account's (``useradd`` gives 1000 to 60000; subordinate ids for containers start at 100000 and
#: take 65536 each), below 2**31 (signed 32-bit uids in old tools).
GRADED_UIDS = range(2_000_000_000, 2_100_000_000)
#: Drops root to the graded uid inside the sandbox: no groups, no capabilities, no new privileges.
SETPRIV = shutil.which("setpriv", path=f"{os.defpath}:/usr/sbin:/sbin") or "setpriv"


def setpriv_args(uid: int) -> tuple[str, ...]:
    """``setpriv``'s options that make the process ``uid`` (and gid ``uid``), with nothing else."""
    return (
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    )


def uids_in_use() -> set[int]:
    """The uids that own a live process on this machine (as this process's ``/proc`` shows them)."""
    owners = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                owners.add(entry.stat(follow_symlinks=False).st_uid)
            except OSError:
                pass
    return owners


#: The uids this grader has handed out (never handed out twice).
_HANDED_OUT: set[int] = set()
_HANDING_OUT = threading.Lock()


def fresh_graded_uid() -> int:
    """A uid from :data:`GRADED_UIDS` for one graded process: drawn at random (a later grader, or another
    one on the same machine, draws from 100 million), never handed out before by this grader, owning no
    live process, and naming no account."""
    with _HANDING_OUT:
        busy = uids_in_use()
        while True:
            uid = GRADED_UIDS[secrets.randbelow(len(GRADED_UIDS))]
            if uid in _HANDED_OUT or uid in busy or _is_account(uid):
                continue
            _HANDED_OUT.add(uid)
            return uid


def _is_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


#: The one command that gives the course environment a bubblewrap of its own.
INSTALL_COMMAND = f"{sys.executable} -m pip install {WHEEL}"


class IsolationError(GraderEnvironmentError):
    """Grading cannot be isolated here and was not allowed to run without it (the message says why)."""


@dataclass(frozen=True)
class Launch:
    """A graded command ready to start: its command line, its environment, and the descriptors the child
    must inherit (``subprocess.Popen``'s ``pass_fds``), which the starter closes once it has started."""

    argv: list[str]
    env: dict[str, str]
    pass_fds: tuple[int, ...] = ()

    def close(self) -> None:
        """Close :attr:`pass_fds` in this process (the child has its own copies)."""
        for fd in self.pass_fds:
            os.close(fd)

    def run(self, **kwargs) -> subprocess.CompletedProcess:
        """Run it to its end (``subprocess.run``'s keyword arguments), then :meth:`close`."""
        try:
            return subprocess.run(self.argv, env=self.env, pass_fds=self.pass_fds, **kwargs)
        finally:
            self.close()


@dataclass(frozen=True)
class View:
    """What one graded process may see besides the system and the interpreter.

    Attributes:
        readable: folders visible read-only, at the same path.
        writable: folders visible read-write, at the same path.
        hidden: folders inside those that appear empty (another lab's or part's held-out tests).
        cwd: the working directory.
        private: a fresh folder of this process's own on disk, whose ``tmp`` and ``shm`` sub-folders
            become its ``/tmp`` and ``/dev/shm`` (None: memory-backed ones).
    """

    readable: tuple[Path, ...]
    writable: tuple[Path, ...]
    hidden: tuple[Path, ...]
    cwd: Path
    private: Path | None = None

    def private_folders(self) -> dict[str, Path]:
        """Where the process's ``/tmp`` and ``/dev/shm`` are on the host (empty without :attr:`private`)."""
        return {} if self.private is None else {"/tmp": self.private / "tmp", "/dev/shm": self.private / "shm"}


class Isolation(Protocol):
    """How a graded command is started (see the module docstring)."""

    name: str
    #: Graded code runs as a host uid of its own (:data:`GRADED_UIDS`), not the grader's.
    runs_as_graded_uid: bool

    def prepare(self, view: View) -> None:
        """Make the folders ``view`` lets the process write writable by the user it runs as."""
        ...

    def command(self, argv: list[str], env: dict[str, str], view: View) -> Launch:
        """What runs ``argv`` (with ``env``) isolated to ``view``; the caller starts it and closes it."""
        ...

    def exit_status(self, code: int) -> int:
        """The graded process's own exit status from the started command's (negative: killed by that signal)."""
        ...


class Unisolated:
    """No isolation: the process has the grader's user, files, network and environment (see the docstring)."""

    name = "none"
    runs_as_graded_uid = False

    def prepare(self, view: View) -> None:
        for folder in view.private_folders().values():
            folder.mkdir(parents=True, exist_ok=True)

    def command(self, argv: list[str], env: dict[str, str], view: View) -> Launch:
        return Launch(list(argv), dict(env))

    def exit_status(self, code: int) -> int:
        return code


@functools.cache
def interpreter_paths(python: str) -> tuple[Path, ...]:
    """Folders the interpreter ``python`` loads code from: its prefixes, ``sys.path`` and its executable's folder."""
    script = (
        "import json, os, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
        "os.path.dirname(os.path.realpath(sys.executable)), *sys.path]))"
    )
    done = subprocess.run(
        [python, "-E", "-c", script], cwd="/", capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise IsolationError(f"{python} could not describe its own paths: {done.stderr.strip()[-300:]}")
    return tuple(Path(entry) for entry in json.loads(done.stdout.strip().splitlines()[-1]) if entry)


def hand_over(folder: Path, uid: int) -> None:
    """Make ``folder`` and everything in it owned by ``uid`` (its group too), as root, before a run.

    Nothing is followed: a symbolic link is re-owned itself (never its target, which graded code may
    have pointed at ``/etc/shadow``), a linked folder is not entered, and a file with several hard links
    is left alone (it may be a link to a file outside the folder).
    """
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in [".", *dirs, *files]:
            path = Path(root) / name
            info = path.lstat()
            if info.st_uid == uid and info.st_gid == uid:
                continue
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                continue
            os.chown(path, uid, uid, follow_symlinks=False)


class Mounts:
    """bubblewrap's mount options, in order, each mount point's missing parents made first, mode 0755.

    bubblewrap would create them itself with the host's modes: a parent such as ``/root`` or the
    grader's private ``/tmp/grader-...`` (0700, root's) would bar the graded user from what lies below.
    """

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self._made: set[Path] = {Path("/")}

    def add(self, option: str, source: Path | None, target: Path) -> None:
        """``option [source] target``, after ``--perms 0755 --dir`` for each parent not made or mounted yet."""
        for parent in reversed(target.parents):
            if parent not in self._made and not any(made in parent.parents for made in SYSTEM_MOUNTS):
                self.args += ["--perms", "0755", "--dir", str(parent)]
                self._made.add(parent)
        self.args += [option, *([str(source)] if source is not None else []), str(target)]
        self._made.add(target)


class Bubblewrap:
    """Each process in its own bubblewrap namespace (see the module docstring).

    Args:
        python: the grading interpreter (its folders are made visible).
        course_root: the pristine course; no folder holding it is made visible whole.
        program: the ``bwrap`` program (default: the first that works, :func:`find_bubblewrap`).
        as_root: drop root to a uid of the process's own (:func:`fresh_graded_uid`) instead of making a
            user namespace (default: whether the grader runs as root).
    """

    def __init__(
        self, python: str, course_root: Path, program: BwrapProgram | None = None, *, as_root: bool | None = None
    ) -> None:
        if program is None:
            program, problems = find_bubblewrap()
            if program is None:
                raise IsolationError(f"cannot isolate the graded code: {'; '.join(problems)}")
        self.python, self.course_root, self.program = python, Path(course_root).resolve(), program
        self.as_root = os.geteuid() == 0 if as_root is None else as_root
        self._uids: dict[View, int] = {}

    @property
    def name(self) -> str:
        """What isolates the run, as the grader's output and ``run.json`` say it."""
        return self.program.describe()

    @property
    def runs_as_graded_uid(self) -> bool:
        return self.as_root

    def graded_uid(self, view: View) -> int:
        """The host uid the process for ``view`` runs as, graded by root: drawn the first time it is asked."""
        if view not in self._uids:
            self._uids[view] = fresh_graded_uid()
        return self._uids[view]

    def _runtime_paths(self) -> list[Path]:
        """The interpreter's folders, except any that would show the course root (and so its solutions)."""
        paths = []
        for path in interpreter_paths(self.python):
            if path.is_dir() and not (path == self.course_root or path in self.course_root.parents):
                paths.append(path)
        return paths

    def _user_args(self) -> list[str]:
        """Namespaces, and who the process is: see *Which user* in the module docstring."""
        if self.as_root:  # no user namespace: the mounts are root's, the user is dropped by setpriv
            return ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        return ["--unshare-all", "--cap-drop", "ALL", "--uid", str(NOBODY), "--gid", str(NOBODY)]

    def prepare(self, view: View) -> None:
        for folder in view.private_folders().values():
            folder.mkdir(parents=True, exist_ok=True)
        if self.as_root:
            for folder in [*view.writable, *([view.private] if view.private else [])]:
                hand_over(folder, self.graded_uid(view))

    def command(self, argv: list[str], env: dict[str, str], view: View) -> Launch:
        packages = [Path(module.__file__).resolve().parent for module in (grader, labkit)]
        mounts = Mounts([self.program.path, "--die-with-parent", "--new-session", *self._user_args()])
        for name in SYSTEM_PATHS:
            path = Path(name)
            if path.is_symlink():
                mounts.args += ["--symlink", str(path.readlink()), name]
            elif path.is_dir():
                mounts.add("--ro-bind", path, path)
        mounts.args += ["--dev", "/dev", "--proc", "/proc"]
        if Path("/sys/fs/cgroup").is_dir():  # other runs' groups, their use and pids: not graded code's to read
            mounts.args += ["--tmpfs", "/sys/fs/cgroup", "--remount-ro", "/sys/fs/cgroup"]
        private = view.private_folders()
        for target in ("/tmp", "/dev/shm"):
            if target in private:
                mounts.add("--bind", private[target], Path(target))
            else:
                mounts.args += ["--perms", "1777", "--tmpfs", target]
        for device in sorted(Path("/dev").glob("nvidia*")):  # CUDA needs the driver's devices
            mounts.add("--dev-bind", device, device)
        for path in [*self._runtime_paths(), *packages, *view.readable]:
            mounts.add("--ro-bind", path, path)
        for path in view.writable:
            mounts.add("--bind", path, path)
        for path in [*(package / "tests" for package in packages), *view.hidden]:
            if path.is_dir():  # empty and read-only (no memory-backed space to fill)
                mounts.add("--tmpfs", None, path)
                mounts.args += ["--remount-ro", str(path)]
        args = [*mounts.args, "--chdir", str(view.cwd), "--clearenv"]
        for key, value in sorted(env.items()):
            args += ["--setenv", key, value]
        pass_fds = () if filter_problem() else (filter_descriptor(),)
        for fd in pass_fds:  # the key system calls refused (grader.execute.seccomp)
            args += ["--seccomp", str(fd)]
        drop = [SETPRIV, *setpriv_args(self.graded_uid(view)), "--"] if self.as_root else []
        return Launch([*args, "--", *drop, *argv], {}, pass_fds)

    def exit_status(self, code: int) -> int:
        """bubblewrap exits with 128 + N when the process it runs was killed by signal N (as a shell does)."""
        if code > 128:
            try:
                return -signal.Signals(code - 128).value
            except ValueError:
                pass
        return code


def program_problem(program: BwrapProgram) -> str | None:
    """Why ``program`` cannot isolate a process here (None when it can).

    Tried: the grader's interpreter starts in the sandbox as the user graded code runs as (as root,
    that also proves ``setpriv`` works and the interpreter is readable by a uid of :data:`GRADED_UIDS`).
    """
    if program.too_old():
        return program.too_old()
    trial = Bubblewrap(sys.executable, Path("/nonexistent-course"), program)
    if trial.as_root and not Path(SETPRIV).is_file():
        return "setpriv (util-linux), which drops root to an unprivileged user inside the sandbox, is not installed"
    view = View((), (), (), Path("/"))
    launch = trial.command(
        [sys.executable, "-E", "-c", "import os; print(os.getuid())"], {"PATH": "/usr/bin:/bin"}, view
    )
    try:
        done = launch.run(capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{program.describe()} could not start ({error})"
    if done.returncode != 0:
        return f"{program.describe()} cannot create namespaces here: {done.stderr.strip()[-300:]}"
    if trial.as_root and done.stdout.strip() != str(trial.graded_uid(view)):
        return f"the sandboxed process was not user {trial.graded_uid(view)} but {done.stdout.strip()!r}"
    return None


@functools.cache
def find_bubblewrap() -> tuple[BwrapProgram | None, tuple[str, ...]]:
    """The ``bwrap`` that isolates graded code here: the system's where it works and is new enough, else
    the course environment's (:mod:`grader.execute.bwrap`); and why each one passed over was."""
    problems = []
    if system_program() is None:
        problems.append("bubblewrap (bwrap) is not installed on this system")
    for program in candidates():
        problem = program_problem(program)
        if problem is None:
            return program, tuple(problems)
        problems.append(problem)
    if not any(program.origin != "system" for program in candidates()):
        problems.append(f"the course environment has no {WHEEL}")
    return None, tuple(problems)


def bubblewrap_problem() -> str | None:
    """Why no bubblewrap can isolate a process here (None when one can)."""
    program, problems = find_bubblewrap()
    return None if program is not None else "; ".join(problems)


def fix_command() -> str:
    """The one command that lets a sandbox work here (called when none does)."""
    from grader.execute.bwrap import wheel_program

    if wheel_program() is None:
        return INSTALL_COMMAND
    if os.geteuid() != 0 and Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").exists():
        return "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
    if os.geteuid() != 0 and Path("/proc/sys/kernel/unprivileged_userns_clone").exists():
        return "sudo sysctl -w kernel.unprivileged_userns_clone=1"
    return "sudo sysctl -w user.max_user_namespaces=15000"


def choose_isolation(
    python: str,
    course_root: Path,
    *,
    instructor_course: bool,
    unsafe: bool,
    log=lambda line: print(line, file=sys.stderr),
) -> Isolation:
    """The isolation a grading gets (see the module docstring), said in one line of the grader's output.

    Args:
        python: the grading interpreter.
        course_root: the pristine course.
        instructor_course: the course holds solutions or held-out tests (an instructor's grading).
        unsafe: ``--unsafe-no-sandbox`` was given.

    Raises:
        IsolationError: an instructor's grading where no bubblewrap works, not allowed to go unisolated.
    """
    if unsafe:
        log("WARNING: --unsafe-no-sandbox: graded code runs with your user, files, network and environment")
        return Unisolated()
    program, problems = find_bubblewrap()
    if program is not None:
        isolation = Bubblewrap(python, course_root, program)
        passed_over = f" ({'; '.join(problems)})" if problems else ""
        user = "a host uid of its own per process" if isolation.as_root else "nobody in a user namespace"
        keyring = filter_problem() or "the kernel keyring closed to it (seccomp)"
        log(f"isolation: {isolation.name}{passed_over}; graded code runs as {user}; {keyring}")
        log(describe_support())
        return isolation
    problem = "; ".join(problems)
    if instructor_course:
        raise IsolationError(
            f"cannot isolate the graded code: {problem}. This course holds solutions or held-out "
            f"tests that graded code must not see: run `{fix_command()}`, or grade anyway with "
            "--unsafe-no-sandbox (graded code can then read them)"
        )
    log(f"note: grading unisolated ({problem}): your code runs with your own user and files, as in `nox -s lab01`")
    return Unisolated()
