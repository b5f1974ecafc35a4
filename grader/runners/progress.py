"""Progress of a long grading, readable both on a terminal and in a log file.

On a terminal, a rich progress bar. Anywhere else (output to a file, a CI job, a Slurm log) a bar
only draws when the job ends, so instead: one plain line per finished student, and a heartbeat line
every minute or so (done / running / pending, time elapsed, an estimate of the time left), so that a
``tail -f`` or a CI log shows the job is alive and how far it is.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

#: Seconds between two heartbeat lines when the output is not a terminal.
HEARTBEAT_S = 60.0


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def heartbeat_line(done: int, running: int, total: int, elapsed_s: float) -> str:
    """``grading: 12 done, 2 running, 46 pending; 8 min 10 s elapsed, about 32 min left`` (pure)."""
    pending = max(0, total - done - running)
    left = f", about {_duration(elapsed_s / done * (total - done))} left" if done and done < total else ""
    return f"grading: {done} done, {running} running, {pending} pending; {_duration(elapsed_s)} elapsed{left}"


class Progress:
    """Tells the user how a grading of ``total`` submissions goes (see the module docstring).

    Args:
        total: submissions to grade.
        stream: where to write (default: standard error).
        interactive: draw a bar (default: when ``stream`` is a terminal).
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO | None = None,
        interactive: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.stream, self.clock = total, stream or sys.stderr, clock
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.done = self.running = 0
        self.start = self.last_beat = clock()
        self._bar = None
        self._lock = threading.Lock()  # graders in several threads report here

    def __enter__(self) -> Progress:
        if self.interactive:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("grading"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                console=Console(file=self.stream),
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("", total=self.total)
        else:
            self._line(f"grading {self.total} submission(s)")
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        else:
            self._line(f"graded {self.done} of {self.total} in {_duration(self.clock() - self.start)}")

    def started(self) -> None:
        """One more submission is being graded."""
        with self._lock:
            self.running += 1

    def set_running(self, running: int) -> None:
        """How many are being graded now (when the work is elsewhere, as on a cluster)."""
        with self._lock:
            self.running = running

    def finished(self, line: str) -> None:
        """One submission is done; ``line`` says how (``alice: 130/170 graded``)."""
        with self._lock:
            self.running = max(0, self.running - 1)
            self.done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=line)
        else:
            self._line(f"[{self.done}/{self.total}] {line}")

    def tick(self) -> None:
        """Write a heartbeat when one is due (call it from time to time while waiting)."""
        now = self.clock()
        if self._bar is None and now - self.last_beat >= HEARTBEAT_S:
            self.last_beat = now
            self._line(heartbeat_line(self.done, self.running, self.total, now - self.start))

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
