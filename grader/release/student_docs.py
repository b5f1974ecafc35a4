"""The student release's documentation: instructor sections stripped, and every command it shows run.

One README serves both audiences. Whatever only instructors can run (grading the reference, the
container and Gradescope tooling, ``--impl=solution``) sits between two HTML comments, invisible
when the Markdown is rendered::

    <!-- instructor-only -->
    ... (prose, tables, whole fenced code blocks)
    <!-- /instructor-only -->

``release`` copies every shipped Markdown file through :func:`strip_instructor_sections`, then checks
the result two ways:

- **statically**: no line may still show the reference solutions (:data:`REFERENCE_PATTERN`:
  ``--impl=solution``, ``LABKIT_IMPL=solution``, ``nox -s solutions``...): a handout that forgot its
  markers fails the release, naming the file and line;
- **by running it**: every command the student docs show (:func:`documented_commands`: lines of
  shell code blocks and inline code that start with ``nox`` or ``python``) runs in a scratch copy of
  the release, in a cheap form (:func:`cheap_form`: pytest sessions only collect, scripts print
  their ``--help``). A command that fails, or a nox session that turns out to be an instructor
  session, fails the release.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader.release.command_times import CommandLimit, command_key, limit_for, run_limited
from labkit.unfinished import UNFINISHED_EXIT

INSTRUCTOR_BEGIN = "<!-- instructor-only -->"
INSTRUCTOR_END = "<!-- /instructor-only -->"
#: What a student document must never show: ways to run or read the reference solutions, and the
#: instructor's nox sessions (they skip in the release, saying so).
REFERENCE_PATTERN = re.compile(
    r"--impl[= ]solution|LABKIT_IMPL=solution|\bsolutions/|nox -s (?:[\w-]+ )*(?:solutions|grade|tests|image[\w-]*"
    r"|docker-test|gradescope-test)(?![\w-])|python3? -m grader (?:batch|report|release|selfcheck|gradescope-bundle)"
)
#: Nox sessions that run pytest: the release check only collects their tests (``-- --co -q``).
PYTEST_SESSION = re.compile(r"lab\d\d|gpu")
#: Commands run at once: at most 2 (each is held to CPU time, :mod:`grader.release.command_times`, so
#: running more at once slows them but changes no verdict; 2 keeps the check's own load modest).
MAX_JOBS = 2
_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)")
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console", "zsh"}
_ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
#: A placeholder in a documented command (``labNN``, ``SUBMISSION``, ``DIR``, ``N``, ``<file>``): the
#: command is a template: a word in capitals (``N``), a run of capitals in a word (``labNN``), or angle brackets.
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$|[A-Z]{2,}|<[^>]*>")
#: The course's nox sessions students may run; any other session a student document shows is an
#: instructor session (it needs the reference, or builds the instructors' images) and fails the release.
STUDENT_SESSIONS = re.compile(r"lab\d\d|bench-lab\d\d|report-lab\d\d|draw-lab\d\d|zoo-lab02|grade-me|gpu|course-env")


class DocsError(ValueError):
    """A student document is malformed (unbalanced markers) or shows instructor material."""


#: Text true of the full scaffold only (it speaks of the starters' guidance blocks): dropped from a
#: ``--scaffold minimal`` release, whose starters have none.
FULL_SCAFFOLD_BEGIN = "<!-- scaffold: full -->"
FULL_SCAFFOLD_END = "<!-- /scaffold: full -->"
#: What a minimal release's documents and starters must not show: the guidance blocks it left out.
GUIDANCE_MENTION = re.compile(r"guidance: (?:begin|end)|guidance comments|guidance blocks?")


def strip_instructor_sections(text: str, source: str = "document") -> str:
    """``text`` without the lines from each :data:`INSTRUCTOR_BEGIN` to its :data:`INSTRUCTOR_END` (pure).

    Raises:
        DocsError: for a marker without its partner, or nested markers.
    """
    return strip_sections(text, INSTRUCTOR_BEGIN, INSTRUCTOR_END, source)


def strip_scaffold_sections(text: str, scaffold: str, source: str = "document") -> str:
    """``text`` for a release of ``scaffold``: the full scaffold's sections kept only in a full release
    (their markers dropped either way; pure)."""
    if scaffold == "full":
        return "".join(
            line
            for line in text.splitlines(keepends=True)
            if line.strip() not in (FULL_SCAFFOLD_BEGIN, FULL_SCAFFOLD_END)
        )
    return strip_sections(text, FULL_SCAFFOLD_BEGIN, FULL_SCAFFOLD_END, source)


def scaffold_mentions(text: str, source: str = "document") -> list[str]:
    """``source:line: text`` for every line of a minimal release that speaks of guidance blocks (pure)."""
    return [
        f"{source}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if GUIDANCE_MENTION.search(line)
    ]


def instructor_sessions(commands: list[str]) -> list[str]:
    """The documented nox commands that name a session outside :data:`STUDENT_SESSIONS` (pure)."""
    shown = []
    for command in commands:
        words = [word for word in shlex.split(command) if not _ENV_ASSIGNMENT.match(word)]
        if words[1:3] == ["-m", "nox"]:
            words = ["nox", *words[3:]]
        if words[:1] != ["nox"] or "-s" not in words:
            continue
        options = words[: words.index("--")] if "--" in words else words
        sessions = options[options.index("-s") + 1 :]
        if any(not STUDENT_SESSIONS.fullmatch(session) and not _PLACEHOLDER.search(session) for session in sessions):
            shown.append(command)
    return shown


def strip_sections(text: str, begin: str, end: str, source: str = "document") -> str:
    """``text`` without the lines from each ``begin`` marker line to its ``end`` (pure).

    Raises:
        DocsError: for a marker without its partner, or nested markers.
    """
    INSTRUCTOR_BEGIN, INSTRUCTOR_END = begin, end  # noqa: N806 - the messages name the markers met
    kept, inside, opened_at = [], False, 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        marker = line.strip()
        if marker == INSTRUCTOR_BEGIN:
            if inside:
                raise DocsError(f"{source}:{number}: {INSTRUCTOR_BEGIN} inside the section opened at line {opened_at}")
            inside, opened_at = True, number
        elif marker == INSTRUCTOR_END:
            if not inside:
                raise DocsError(f"{source}:{number}: {INSTRUCTOR_END} without an opening {INSTRUCTOR_BEGIN}")
            inside = False
        elif not inside:
            kept.append(line)
    if inside:
        raise DocsError(f"{source}:{opened_at}: {INSTRUCTOR_BEGIN} is never closed")
    return re.sub(r"\n{3,}", "\n\n", "".join(kept))


def reference_mentions(text: str, source: str = "document") -> list[str]:
    """``source:line: text`` for every line that shows the reference or an instructor command (pure)."""
    return [
        f"{source}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if REFERENCE_PATTERN.search(line)
    ]


def _command_of(line: str) -> str | None:
    """The shell command on ``line`` (prompt and trailing comment removed), or None if it is not one."""
    line = line.strip().removeprefix("$ ")
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    while words and _ENV_ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not (
        words[:1] == ["nox"] or (words[:1] in (["python"], ["python3"]) and words[1:2] == ["-m"] and len(words) > 2)
    ):
        return None
    return shlex.join(word for word in shlex.split(line, comments=True) if word != "...")


def documented_commands(text: str) -> list[str]:
    """Every ``nox``/``python`` command ``text`` shows: shell code-block lines and inline code (pure).

    Code blocks in another language (``python``, ``toml``...) hold code, not commands, and are skipped.
    A line of several commands (``a && b``) counts each of them.
    """
    commands: list[str] = []
    fence: str | None = None
    shell = False
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if opened and fence is None:
            fence, shell = opened.group(1), opened.group(2).lower() in _SHELL_LANGUAGES
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            elif shell:
                commands += [c for part in re.split(r"&&|;", line) if (c := _command_of(part))]
            continue
        for code in _INLINE_CODE.findall(line):
            commands += [c for part in re.split(r"&&|;", code) if (c := _command_of(part))]
    return list(dict.fromkeys(commands))


#: nox sessions the release check runs for real on the starter: they are quick there (a lab's tests fail
#: fast, a benchmark or report stops at the first unfinished step with one line saying which).
RUN_SESSIONS = re.compile(r"lab\d\d|bench-lab\d\d|report-lab\d\d|draw-lab\d\d|course-env")
#: A run for real passed when it exited 0, or stopped where an unfinished starter must stop: with the
#: step table's "Start here" or a script's one-line "finish step N first", and no traceback.
STOPPED_AT_A_STEP = re.compile(r"Start here:|finish step \d+ first")
RUNS, PARSES = "runs", "parses"


@dataclass(frozen=True)
class CheapRun:
    """How the release check runs one documented command: ``argv`` with ``env`` added, or why not.

    ``kind``: ``runs`` (the command itself, on the starter) or ``parses`` (only ``--help``: it would take
    minutes or needs what a starter lacks); ``skipped`` says why it is not run at all.
    """

    command: str
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    skipped: str = ""
    kind: str = PARSES


def cheap_form(command: str, python: str = sys.executable) -> CheapRun:
    """How the release check runs a documented command (pure; see :class:`CheapRun`).

    Run for real: ``nox -s`` with lab, benchmark, report or environment sessions (:data:`RUN_SESSIONS`)
    and ``python -m labNN_...`` modules. Parsed only (``--help``): every other nox session and module
    (grading the whole course, the GPU check). Not run: ``pip install`` (it installs), a template
    (``nox -s labNN``: a word with capitals stands for a value), nox's default sessions.
    ``python``/``nox`` are the course environment's (``python``).
    """
    words = shlex.split(command)
    env = []
    while words and _ENV_ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env.append((name, value))
    if words[1:3] == ["-m", "pip"]:
        return CheapRun(command, skipped="installs packages")
    placeholders = [word for word in words if _PLACEHOLDER.search(word)]
    if placeholders:
        return CheapRun(command, skipped=f"a template ({', '.join(placeholders)} stands for a value)")
    if words[1:3] == ["-m", "nox"]:
        words = ["nox", *words[3:]]
    if words[0] == "nox":
        split = words.index("--") if "--" in words else len(words)
        options, after = words[1:split], words[split + 1 :]
        sessions = options[options.index("-s") + 1 :] if "-s" in options else []
        if not sessions:
            return CheapRun(command, skipped="runs nox's default sessions (the labs' tests, checked one by one)")
        if all(RUN_SESSIONS.fullmatch(session) for session in sessions):
            if all(PYTEST_SESSION.fullmatch(session) for session in sessions) and not {"-x", "--exitfirst"} & set(
                after
            ):
                after = [*after, "-x"]  # the starter's first failing test ends the run: the step table, in seconds
            return CheapRun(
                command,
                (python, "-m", "nox", "-s", *sessions, "--", *after)
                if after
                else (python, "-m", "nox", "-s", *sessions),
                tuple(env),
                kind=RUNS,
            )
        return CheapRun(command, (python, "-m", "nox", "-s", *sessions, "--", *after, "--help"), tuple(env))
    if words[1:2] == ["-m"] and len(words) > 2:
        if re.match(r"lab\d\d_", words[2]):
            return CheapRun(command, (python, *words[1:]), tuple(env), kind=RUNS)
        return CheapRun(command, (python, *words[1:], "--help"), tuple(env))
    return CheapRun(command, skipped="not a module or nox command")


def _run_one(run: CheapRun, cwd: Path, env: dict[str, str], limit: CommandLimit) -> tuple[str | None, float]:
    """Run one command under ``limit``; return why it failed (None: it did not) and its CPU seconds
    (see :data:`STOPPED_AT_A_STEP` for runs)."""
    done = run_limited(run.argv, cwd=cwd, env={**env, **dict(run.env)}, limit=limit)
    if done.over:
        return done.over, done.cpu_s
    output = done.output
    if "instructor session" in output:
        return f"`{shlex.join(run.argv[1:])}` is an instructor session: {output.strip()[-300:]}", done.cpu_s
    if done.returncode == 0:
        return None, done.cpu_s
    tail = "\n".join(output.strip().splitlines()[-40:])
    # A lab module stopped at a TODO exits UNFINISHED_EXIT; nox reports any failing session as 1.
    expected = 1 if run.argv[1:3] == ("-m", "nox") else UNFINISHED_EXIT
    stopped = run.kind == RUNS and STOPPED_AT_A_STEP.search(tail) and "Traceback (most recent call last)" not in output
    if stopped and done.returncode == expected:
        return None, done.cpu_s
    if stopped:
        return (
            f"`{shlex.join(run.argv[1:])}` stopped at an unfinished step but exited {done.returncode}, "
            f"not {expected} (labkit.unfinished.UNFINISHED_EXIT)"
        ), done.cpu_s
    return f"`{shlex.join(run.argv[1:])}` exited {done.returncode}: {output.strip()[-800:]}", done.cpu_s


def run_documented_commands(
    release: Path,
    commands: list[str],
    python: str = sys.executable,
    *,
    jobs: int | None = None,
    times: dict[str, float] | None = None,
    log=print,
) -> tuple[list[str], dict[str, int], dict[str, float]]:
    """Run each command's :func:`cheap_form` in a scratch copy of ``release``, ``jobs`` at a time, each
    held to the CPU limit its recorded time gives (``times``: :func:`grader.release.command_times.read_command_times`);
    return the failures (``command: why``), how many commands were run, parsed and not run, and each
    command's CPU seconds (by :func:`~grader.release.command_times.command_key`: what ``--record-times`` writes).

    nox uses ``python``'s environment as it is (``COURSE_PYTHON``, as in the course image), so the
    check installs nothing; the copy keeps caches and output out of the release itself. Commands
    with the same cheap form (``python3 -m nox -s lab01`` and ``nox -s lab01``) run once.
    """
    times = times or {}
    runs: dict[tuple, CheapRun] = {}
    counts = {RUNS: 0, PARSES: 0, "not run": 0}
    for command in commands:
        run = cheap_form(command, python)
        counts["not run" if run.skipped else run.kind] += 1
        if run.skipped:
            log(f"    - {command}  (not run: {run.skipped})")
        else:
            runs.setdefault((run.argv, run.env), run)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "LABKIT_IMPL", "PYTEST_ADDOPTS", "VIRTUAL_ENV")
    }
    # OpenMP threads that wait sleep instead of spinning: a spinning thread's CPU time grows with the
    # machine's load, and the limits count CPU time (as the grader's own, grader.execute.command.pytest_env).
    env.update(
        COURSE_PYTHON=python,
        PYTHONDONTWRITEBYTECODE="1",
        PYTEST_ADDOPTS="-p no:cacheprovider",
        OMP_WAIT_POLICY="PASSIVE",
    )
    failures, measured = [], {}
    with tempfile.TemporaryDirectory(prefix="grader-docs-") as scratch:

        def run_in_own_copy(index: int, run: CheapRun) -> tuple[CheapRun, CommandLimit, str | None, float]:
            copy = Path(scratch) / f"release-{index}"  # its own copy: no command sees another's output
            shutil.copytree(release, copy, symlinks=True)
            limit = limit_for(command_key(run.argv, run.env), times)
            try:
                return run, limit, *_run_one(run, copy, env, limit)
            finally:
                shutil.rmtree(copy, ignore_errors=True)

        with ThreadPoolExecutor(max_workers=jobs or min(MAX_JOBS, os.cpu_count() or 1)) as pool:
            outcomes = pool.map(run_in_own_copy, *zip(*enumerate(runs.values())))
            for run, limit, failure, cpu in outcomes:
                verdict = "FAILED" if failure else "ran" if run.kind == RUNS else "parses"
                log(
                    f"    {verdict} {run.command}  ({shlex.join(run.argv[1:])[-60:]}; "
                    f"{cpu:.1f} s CPU of {limit.cpu_s:g})"
                )
                measured[command_key(run.argv, run.env)] = cpu
                if failure:
                    failures.append(f"{run.command}: {failure}")
    return failures, counts, measured
