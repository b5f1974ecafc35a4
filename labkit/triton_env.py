"""Launch one Triton kernel on either device a lab targets: compiled on CUDA, interpreted on CPU.

Triton decides how a kernel runs when it is *decorated*: ``@triton.jit`` returns a compiled
``JITFunction``, or, when ``TRITON_INTERPRET=1`` is set at that moment, an ``InterpretedFunction``
that runs the kernel with NumPy, one program at a time. Neither serves both devices:

- a compiled kernel cannot read CPU memory (``Pointer argument (at 0) cannot be accessed from
  Triton (cpu tensor?)``), and on a machine without a GPU it cannot be launched at all;
- an interpreted kernel is a correctness tool, thousands of times too slow for a GPU.

A process that holds both kinds of tensors (the CPU tests on a GPU machine, a CPU model next to a
CUDA one) therefore needs both forms of the same kernel, chosen per launch by the tensors' device.
That is :func:`kernel_for`::

    kernel_for(layernorm_gelu_kernel, x.device)[grid](x, ...)

- **CUDA**: the compiled kernel. While something traces the launch (``make_fx`` as Inductor does,
  ``torch.compile``), it goes through ``torch.library.wrap_triton(kernel)`` and becomes a node that
  Inductor compiles into its own generated code; a plain eager launch takes the kernel as it is (see
  below).
- **CPU**: the kernel's *interpreted twin* (:func:`interpreted`): the same Python function run by
  Triton's interpreter.

A twin alone is not enough: the kernel calls other ``@triton.jit`` functions (your helpers, and
Triton's own ``tl.sum``, ``tl.max``, ``tl.cdiv``, ... which are ``@triton.jit`` functions too), and a
compiled one refuses to be called outside a kernel. So for the duration of an interpreted launch,
every ``@triton.jit`` function the kernel can reach (in its module, the modules of the functions
found there, and ``triton.language``) is swapped for its own twin. That is what the interpreter does
anyway for Triton's builtins (``tl.load``, ``tl.store``, ``tensor.to``, ...), and what
``TRITON_INTERPRET=1`` achieves by decorating everything interpreted at import.

Afterwards *everything* is put back, the interpreter's own patches included: it patches
``triton.language`` for each nested ``@triton.jit`` call and never restores those (harmless in a
process that only interprets), so a kernel compiled later in the same process would be built from
interpreter functions and fail (``'ir.value' object has no attribute 'dtype'``). Every attribute of
the reachable modules and of ``triton.language``'s classes is recorded before the launch and
restored after it.

On CUDA, ``wrap_triton`` is only needed while something traces the launch (``make_fx``, Inductor's
pattern replacement, ``torch.compile``): run eagerly, its wrapper goes through a higher-order
operator that costs about 0.1 ms of host time per launch, more than the kernel itself on small
inputs. A plain eager launch therefore gets the compiled kernel as it is.

Nothing here reads or sets ``TRITON_INTERPRET``: with it unset, kernels are decorated compiled
(which needs no GPU until a launch), and CPU launches still take the interpreter. With it set to
``1`` (Triton's own switch, e.g. to debug a kernel with ``print``), every launch is interpreted.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch

from labkit.guard_bands import guarded_launch

#: Where launches on CPU tensors go. ``"interpreted"`` (the default) runs them in Triton's
#: interpreter. ``"compiled"`` is for compile-only simulations of a GPU (``simulated_gpu``), where
#: CPU tensors stand in for CUDA ones and nothing is ever executed.
cpu_launches = "interpreted"
CPU_LAUNCH_MODES = ("interpreted", "compiled")
#: Triton's own modules of ``@triton.jit`` functions (``tl.sum`` lives in ``triton.language.standard``).
TRITON_LANGUAGE_MODULES = ("triton.language", "triton.language.standard", "triton.language.random")

# Interpreted twins, keyed by id() of the compiled function; the function is kept beside its twin so
# that its id cannot be reused by another object.
_twins: dict[int, tuple[Any, Any]] = {}
# Swapping module attributes is process-wide: one interpreted launch at a time.
_swap_lock = threading.RLock()
# Marks an attribute that an owner did not have (see _attributes_restored).
_MISSING = object()


def _is_interpreted(kernel: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(kernel, InterpretedFunction)


def _is_jit_function(kernel: Any) -> bool:
    from triton.runtime.jit import JITFunction

    return isinstance(kernel, JITFunction)


def _twin_of(function: Any) -> Any:
    """The ``InterpretedFunction`` running the same Python code as the compiled ``function`` (made once)."""
    from triton.runtime.interpreter import InterpretedFunction

    cached = _twins.get(id(function))
    if cached is None or cached[0] is not function:
        cached = (function, InterpretedFunction(function.fn))
        _twins[id(function)] = cached
    return cached[1]


def _reachable_modules(kernel: Any) -> list[ModuleType]:
    """The modules whose ``@triton.jit`` functions an interpreted ``kernel`` may call."""
    pending = [
        sys.modules[kernel.fn.__module__],
        *(sys.modules[name] for name in TRITON_LANGUAGE_MODULES if name in sys.modules),
    ]
    found: dict[str, ModuleType] = {}
    while pending:
        module = pending.pop()
        if module.__name__ in found:
            continue
        found[module.__name__] = module
        for value in list(vars(module).values()):
            if _is_jit_function(value) and value.fn.__module__ in sys.modules:
                pending.append(sys.modules[value.fn.__module__])
    return list(found.values())


def _import_lazy_triton_modules() -> None:
    """Import what Triton imports on its first launch, so it is not imported while functions are swapped.

    Gluon (Triton's lower-level dialect) is imported lazily by argument specialisation and checks,
    as it is imported, that ``tl.cdiv`` & co. are compiled functions.
    """
    try:
        import triton.experimental.gluon  # noqa: F401
    except ImportError:  # older Triton: no Gluon
        pass


def _triton_language() -> list[Any]:
    """``triton.language``'s modules and their classes:
    what the interpreter patches (``tl.load``, ``tensor.to``, ...)."""
    modules = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("triton.language") and isinstance(module, ModuleType)
    ]
    classes = {
        id(value): value
        for module in modules
        for value in vars(module).values()
        if inspect.isclass(value) and value.__module__.startswith("triton.language")
    }
    return [*modules, *classes.values()]


@contextmanager
def _attributes_restored(owners: list[Any], *, keep_added: tuple[Any, ...] = ()) -> Iterator[None]:
    """Record every attribute of ``owners`` (modules, classes); afterwards restore changed ones, delete added ones.

    Attributes added to the owners in ``keep_added`` stay: the interpreter adds its own globals to a
    kernel's module when it first rewrites the kernel, and reuses that rewrite later. The interpreter's
    globals stay wherever they were added, ``triton.language``'s modules included: it adds them to the
    module of every ``@triton.jit`` function it rewrites (``tl.max``'s, ``triton.language.standard``),
    caches the rewrite for the whole process, and the next launch's call of that rewrite reads them
    there (``NameError: name 'interpreter_semantic' is not defined`` when deleted). They shadow
    nothing: the interpreter adds only names the module did not have.
    """
    from triton.runtime import interpreter

    interpreter_globals = vars(interpreter)
    recorded = [(owner, dict(vars(owner))) for owner in owners]
    try:
        yield
    finally:
        for owner, before in recorded:
            if not any(owner is kept for kept in keep_added):
                for name in [name for name in vars(owner) if name not in before]:
                    if interpreter_globals.get(name, _MISSING) is not vars(owner)[name]:
                        delattr(owner, name)
            for name, value in before.items():
                if vars(owner).get(name, _MISSING) is not value:
                    setattr(owner, name, value)


@contextmanager
def _jit_functions_interpreted(kernel: Any) -> Iterator[None]:
    """Swap every ``@triton.jit`` function reachable from ``kernel`` for its twin; restore everything after."""
    _import_lazy_triton_modules()
    with _swap_lock:
        modules = _reachable_modules(kernel)
        language = _triton_language()
        owners = {id(owner): owner for owner in (*modules, *language)}
        with _attributes_restored(list(owners.values()), keep_added=tuple(m for m in modules if m not in language)):
            for module in modules:
                for name, value in list(vars(module).items()):
                    if _is_jit_function(value):
                        setattr(module, name, _twin_of(value))
            yield


class InterpretedLaunch:
    """What :func:`interpreted` returns: ``launch[grid](*args, **kwargs)`` runs the kernel in the interpreter."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.twin = _twin_of(kernel)

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        with _jit_functions_interpreted(self.kernel):
            return self.twin.run(*args, grid=grid, warmup=False, **kwargs)


def interpreted(kernel: Any) -> Any:
    """The interpreted form of a ``@triton.jit`` kernel (the kernel itself if already interpreted).

    Raises:
        TypeError: ``kernel`` is not a ``@triton.jit`` function.
    """
    if _is_interpreted(kernel):
        return kernel
    if not _is_jit_function(kernel):
        raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}")
    return InterpretedLaunch(kernel)


class GuardedLaunch:
    """An interpreted kernel whose every launch runs on guarded copies of its tensors
    (:func:`labkit.guard_bands.guarded_launch`): a read outside a tensor reads NaN, a write outside one raises."""

    def __init__(self, launchable: Any, name: str) -> None:
        self.launchable, self.name = launchable, name

    def __getitem__(self, grid: Any) -> Any:
        return guarded_launch(self.launchable[grid], self.name)


def kernel_for(kernel: Any, device: torch.device | str) -> Any:
    """The launchable form of ``kernel`` for tensors on ``device``: index it with the grid and call it.

    Args:
        kernel: a ``@triton.jit`` function.
        device: where the launch's tensors live (``x.device``).

    Returns:
        On CUDA, the compiled kernel: through ``wrap_triton`` while traced (``make_fx``, Inductor), as
        it is for a plain eager launch. On CPU, the kernel's interpreted form, unless
        :data:`cpu_launches` is ``"compiled"``, each launch fenced by guard bands
        (:mod:`labkit.guard_bands`: a read outside a tensor reads NaN, a write outside one raises
        :class:`~labkit.guard_bands.OutOfBoundsWrite`).

    Raises:
        ValueError: a device other than CPU or CUDA, or an unknown :data:`cpu_launches`.
    """
    device = torch.device(device)
    if cpu_launches not in CPU_LAUNCH_MODES:
        raise ValueError(f"cpu_launches={cpu_launches!r}: expected one of {CPU_LAUNCH_MODES}")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"Triton kernels here run on CPU (interpreted) or CUDA, not on {device}")
    if device.type == "cpu" and cpu_launches == "interpreted":
        return GuardedLaunch(interpreted(kernel), getattr(kernel, "__name__", repr(kernel)))
    if _is_interpreted(kernel) or not traced():  # interpreted (TRITON_INTERPRET=1), or a plain eager launch
        return kernel
    from torch.library import wrap_triton

    return wrap_triton(kernel)


def traced() -> bool:
    """True while something may record this launch: ``torch.compile`` or a dispatch mode (``make_fx``, fake tensors)."""
    return torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
