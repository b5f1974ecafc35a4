"""Read the student's files before they run: flag the constructs a lab never needs and an attack does.

Isolation (:mod:`grader.execute.isolation`) and the resource caps bound what graded code can reach;
the canaries, the checked results channel and the introspection guard detect what it does to pytest
in memory. None of them reads the code. A reviewer does: this module points them at the lines worth
reading, with one flag per construct (``review: labA_arith/arith.py:12 imports ctypes``).

The labs are about FX graphs, PyTorch backends and Triton kernels: their reference solutions import
torch, the standard library's data structures and the course's harness, and nothing below. Each rule
names a construct that lets code reach outside its own computation:

- **modules**: ``ctypes`` (C memory, the interpreter's internals), ``gc`` (every live object, the
  tests' included), pytest's internals (``_pytest``) and ``pytest`` itself, the grader, ``subprocess``,
  ``socket``, ``signal``, ``multiprocessing``, ``importlib``, ``builtins``;
- **calls and attributes**: ``sys._getframe``, ``sys.settrace``/``setprofile``, ``sys.modules``,
  ``sys.meta_path``, ``sys.addaudithook``, ``inspect.currentframe``/``stack``, ``os.fork``,
  ``os.setsid``, ``os.kill``, ``os.system``, ``os.exec*``/``spawn*``, ``os._exit``, ``os.environ``, ``sys.argv``,
  ``atexit.register``;
  frame and code internals (``f_back``, ``f_globals``, ``tb_frame``, ``gi_frame``, ``__globals__``,
  ``__code__``, ``__subclasses__``, ``__builtins__``);
- **builtins that reach code by a name made at run time**: ``__import__``, ``eval``, ``exec``, ``compile``;
- **pytest hooks**: a function named ``pytest_*`` or a ``pytest_plugins`` list in a lab file;
- **strings** naming the grader's world: ``/proc/``, ``report.json``, ``json-report``, ``heldout``,
  ``solutions``, ``grader``, and a string that is the dotted name of a module above (``"_pytest.reports"``,
  which ``__import__`` or ``importlib`` would import without an import statement) (docstrings excepted:
  prose may name them).

A flag costs no points: the score stands, and the class report lists flagged submissions for a TA to
read. A file that does not parse gets no flag here (its tests fail to collect, which says so).
:func:`review_files` is pure: it reads files, runs nothing, and its tests prove the reference
solutions and starters get no flag while every attack of the grader's corpus does.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

#: Modules a lab file never needs, and what importing one allows.
MODULES = {
    "ctypes": "calls C code (the interpreter's memory)",
    "gc": "walks every live object",
    "_pytest": "pytest's internals",
    "pytest": "pytest itself (hooks, the running session)",
    "grader": "the grader's own code",
    "subprocess": "starts programs",
    "socket": "opens network connections",
    "signal": "handles signals (the grader's alarms)",
    "multiprocessing": "starts processes",
    "importlib": "imports by name at run time",
    "builtins": "the builtins every module shares",
}
#: ``module.attribute`` uses a lab file never needs.
ATTRIBUTES = {
    ("sys", "_getframe"): "reads the call stack",
    ("sys", "_current_frames"): "reads every thread's stack",
    ("sys", "settrace"): "traces other code",
    ("sys", "setprofile"): "traces other code",
    ("sys", "modules"): "reaches loaded modules (the tests', the grader's)",
    ("sys", "meta_path"): "hooks imports",
    ("sys", "addaudithook"): "adds an audit hook",
    ("inspect", "currentframe"): "reads the call stack",
    ("inspect", "stack"): "reads the call stack",
    ("inspect", "getouterframes"): "reads the call stack",
    ("os", "fork"): "forks the process",
    ("os", "setsid"): "leaves its session (a daemon)",
    ("os", "kill"): "signals processes",
    ("os", "killpg"): "signals processes",
    ("os", "system"): "runs a shell",
    ("os", "popen"): "runs a shell",
    ("os", "_exit"): "ends the process without pytest's report",
    ("os", "environ"): "reads the environment",
    ("sys", "argv"): "reads the grader's command line (which process this is)",
    ("atexit", "register"): "runs code after the tests have ended",
}
#: ``os`` functions by prefix: ``os.execv``, ``os.spawnl``...
OS_PREFIXES = {"exec": "replaces the process with a program", "spawn": "starts programs"}
#: Attributes of frames, tracebacks, generators and functions that reach other code's state.
INTERNALS = {
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "tb_frame",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "__globals__",
    "__code__",
    "__subclasses__",
    "__builtins__",
    "co_code",
}
#: Builtins a lab file never calls: each reaches code or modules by a name made at run time.
BUILTINS = {
    "__import__": "imports a module by name at run time",
    "eval": "runs code from a string",
    "exec": "runs code from a string",
    "compile": "compiles code from a string",
}
#: Text that names the grader's world (a path it reads, its report, what students must not see).
STRINGS = ("/proc/", "report.json", "json-report", "heldout", "solutions", "grader")
#: A string that could be a module's dotted name (``"_pytest.reports"``).
MODULE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
#: Most flags of one file (the rest are counted in the last).
MAX_FLAGS_PER_FILE = 6


def _root(node: ast.AST) -> str | None:
    """The name an attribute chain starts from (``os`` in ``os.path.join``), or None."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _module_name(name: str) -> str | None:
    top = name.split(".")[0]
    return top if top in MODULES else None


def findings(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for every flagged construct in ``source`` (empty when it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[tuple[int, str]] = []
    aliases: dict[str, str] = {}  # local name -> module (import os as o)
    docstrings = {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        for body in [node.body]
        if body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
                if _module_name(alias.name):
                    found.append((node.lineno, f"imports {alias.name}: {MODULES[_module_name(alias.name)]}"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = _module_name(node.module)
            if top:
                found.append((node.lineno, f"imports from {node.module}: {MODULES[top]}"))
            for alias in node.names:
                what = ATTRIBUTES.get((node.module.split(".")[0], alias.name))
                if what:
                    found.append((node.lineno, f"imports {node.module}.{alias.name}: {what}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            module = aliases.get(_root(node.value) or "", _root(node.value))
            what = ATTRIBUTES.get((module or "", node.attr)) if isinstance(node.value, ast.Name) else None
            if what is None and module == "os" and isinstance(node.value, ast.Name):
                what = next((text for prefix, text in OS_PREFIXES.items() if node.attr.startswith(prefix)), None)
            if what:
                found.append((node.lineno, f"uses {module}.{node.attr}: {what}"))
            elif node.attr in INTERNALS:
                found.append((node.lineno, f"reads .{node.attr}: another frame's or function's internals"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("pytest_"):
            found.append((node.lineno, f"defines {node.name}: a pytest hook in a lab file"))
        elif isinstance(node, ast.Name) and node.id in ("pytest_plugins", "__builtins__"):
            found.append((node.lineno, f"uses {node.id}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILTINS:
            found.append((node.lineno, f"calls {node.func.id}: {BUILTINS[node.func.id]}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            named = [text for text in STRINGS if text in node.value]
            module = _module_name(node.value) if MODULE_PATH.fullmatch(node.value) else None
            if named:
                found.append((node.lineno, f"a string naming {named[0]!r}"))
            elif module:  # "_pytest.reports": a module named by a string reaches it without an import
                found.append((node.lineno, f"a string naming the module {node.value!r}: {MODULES[module]}"))
    return sorted(set(found))


def review_files(root: Path, files: Iterable[str], label: str = "") -> list[str]:
    """One review flag per construct found in each of ``files`` (paths relative to ``root``).

    ``label`` prefixes every flag (the lab id); a file's flags beyond :data:`MAX_FLAGS_PER_FILE` are
    counted in its last one.
    """
    flags = []
    for rel in files:
        try:
            source = (root / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        seen: dict[str, int] = {}
        for line, what in findings(source):
            seen.setdefault(what, line)  # the first line of each construct
        items = sorted(seen.items(), key=lambda item: item[1])
        shown = items[:MAX_FLAGS_PER_FILE]
        for what, line in shown:
            flags.append(f"{label + ': ' if label else ''}review: {rel}:{line} {what}")
        if len(items) > len(shown):
            flags.append(
                f"{label + ': ' if label else ''}review: {rel}: {len(items) - len(shown)} more constructs to read"
            )
    return flags
