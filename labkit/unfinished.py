"""One line, never a traceback, when a course command meets a starter TODO (benchmarks, reports, checks).

Run on an untouched or half-done starter, a lab's benchmark, report, picture or check module reaches
a TODO block, which raises ``NotImplementedError``. Each of them stops the same way: one line on
stderr naming the handout step to finish first, in the words ``nox -s labNN`` uses
(:func:`labkit.step_summary.step_to_finish_first`), and the exit status :data:`UNFINISHED_EXIT`.

The step named is the *first* step of the handout whose TODO still stands (:func:`open_steps`), not
the step of the TODO the command happened to meet: a benchmark that needs step 9's pipeline, run on
an untouched starter, says to start with step 0, as ``nox -s lab01``'s "Start here" does.

Use :func:`finish_steps_first` around the work (a context manager), or :func:`stop_if_unfinished`
inside an ``except`` clause that reports other errors itself. An error that is not a starter TODO
(PyTorch's own ``NotImplementedError``, a bug) is left alone: it keeps its traceback.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from labkit.labspec import LabSpec, Step, load_lab_spec

#: Exit status of a command stopped at an unfinished step: not 0 (nothing was measured), not 1 (a
#: failure of finished work) and not 2 (a usage error, as argparse exits).
UNFINISHED_EXIT = 3


def standing_todos(source: str) -> list[str]:
    """The messages of the starter TODOs in ``source``: ``raise NotImplementedError("...")`` statements
    that are a function body's own statements (a conditional ``raise`` a student wrote is not one)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    messages = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for statement in function.body:
            if (
                isinstance(statement, ast.Raise)
                and isinstance(statement.exc, ast.Call)
                and getattr(statement.exc.func, "id", None) == "NotImplementedError"
            ):
                args = statement.exc.args
                messages.append(args[0].value if args and isinstance(args[0], ast.Constant) else "")
    return messages


def open_steps(spec: LabSpec, folder: Path | None = None) -> list[Step]:
    """The handout steps whose TODOs still stand in the lab's editable files under ``folder``
    (default: the lab's own package), in handout order. A TODO whose message names its step
    (``TODO(step 5): ...``) belongs to that step, any other to the first step that edits its file."""
    from labkit.step_summary import todo_step

    folder = folder or spec.directory
    numbers = set()
    for name in spec.editable:
        path = folder / name
        if path.is_file():
            for message in standing_todos(path.read_text(encoding="utf-8")):
                step = todo_step(spec, message, name)
                if step is not None:
                    numbers.add(step.number)
    return [step for step in spec.steps if step.number in numbers]


def unfinished_step_line(error: BaseException, package: str, needs: str) -> str | None:
    """``"{needs}: lab01: finish step 0 first (...)"`` when ``error`` is a starter TODO, else None."""
    from labkit.step_summary import step_to_finish_first, todo_frame

    spec = load_lab_spec(package)
    frame = todo_frame(error, spec)
    if frame is None:
        return None
    line = step_to_finish_first(error, spec, open_steps(spec, Path(frame.filename).parent))
    return f"{needs}: {line}" if line else None


def stop_if_unfinished(error: BaseException, package: str, needs: str) -> None:
    """Inside an ``except``: print the one line and exit :data:`UNFINISHED_EXIT` when ``error`` is a starter TODO.

    Args:
        package: the lab's package (``"lab01_fx_passes"``): its ``lab.toml`` maps files to steps.
        needs: what the command was running, in a few words (``"the benchmark's default_pipeline"``).
    """
    line = unfinished_step_line(error, package, needs)
    if line is not None:
        print(line, file=sys.stderr, flush=True)
        raise SystemExit(UNFINISHED_EXIT) from None


@contextmanager
def finish_steps_first(package: str, needs: str) -> Iterator[None]:
    """Run the ``with`` block; a starter TODO anywhere in it (wrapped, as ``torch.compile`` wraps a
    backend's error, included) ends the process with one line (:func:`stop_if_unfinished`)."""
    try:
        yield
    except Exception as error:
        stop_if_unfinished(error, package, needs)
        raise
