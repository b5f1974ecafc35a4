"""What lab 2's graded tests check, and how they build their cases (harness: do not edit).

``test_lab.py`` asserts through these helpers, so each test reads as its contract: build a case, run
your code, assert what must hold. Read them to see exactly what a failing test measured:

- **programs by hand** (:func:`linear_program`, :func:`single_op_program`, :func:`isa_cases`,
  :func:`corrupt_isa`, :func:`mutate_program`): NPU programs and ISA files written without your
  lowering, good and broken, to test the simulator alone (step 1);
- **partitioned graphs** (:func:`assert_partitioned_graph_computes`, :func:`real_values`,
  :func:`returns_an_input`, :func:`is_empty`): a partitioned graph is run node by
  node on real values, and a node's elision is judged from those values, never from your own
  report (step 3);
- **lowered programs** (:func:`dynamo_graph`, :func:`op_counts`, :func:`isa_ops_except`):
  the graph your lowering receives, and what its program emits (step 4);
- **compiling through the backend** (:func:`compile_and_run`, :func:`backend_for`,
  :func:`compiled_outputs_differing`, :func:`compiled_forms_off_eager`): a function compiled from a
  clean Dynamo cache, its coverage, and the names of the outputs that differ from eager (steps 4, 5).

:data:`TOLERANCE` is the spec's: a compiled output matches eager within 1e-4, relative and absolute.
"""

from __future__ import annotations

import collections
import copy
import importlib
import json
import warnings

import torch

from lab02_npu_backend.given import coverage
from lab02_npu_backend.given.coverage import NpuCoverageWarning
from lab02_npu_backend.given.graphs import capture_graphs
from lab02_npu_backend.given.ir import ProgramError
from lab02_npu_backend.given.isa import DTYPE_NAMES, default_isa
from labkit.fx_nodes import run_graph
from labkit.numerics import output_error, outputs_close
from labkit.spellings import respelled

#: The spec's tolerance: a compiled output matches eager within 1e-4 (relative and absolute).
TOLERANCE = 1e-4


# ----------------------------------------------------- programs by hand, for the simulator (step 1)
def linear_program(dtype: str = "float32") -> dict:
    """``y = x @ w.T + b`` as an NPU program, written by hand."""
    return {
        "format": "npu-program",
        "version": 1,
        "name": "linear",
        "tensors": {
            "x": {"shape": [2, 3], "dtype": dtype},
            "w": {"shape": [4, 3], "dtype": dtype},
            "b": {"shape": [4], "dtype": dtype},
            "w_t": {"shape": [3, 4], "dtype": dtype},
            "xw": {"shape": [2, 4], "dtype": dtype},
            "y": {"shape": [2, 4], "dtype": dtype},
        },
        "inputs": ["x", "w", "b"],
        "outputs": ["y"],
        "instructions": [
            {"op": "permute", "inputs": ["w"], "output": "w_t", "attrs": {"dims": [1, 0]}},
            {"op": "matmul", "inputs": ["x", "w_t"], "output": "xw", "attrs": {}},
            {"op": "add", "inputs": ["xw", "b"], "output": "y", "attrs": {}},
        ],
    }


def linear_inputs():
    """Seeded inputs ``x, w, b`` of :func:`linear_program`."""
    torch.manual_seed(0)
    return [torch.randn(2, 3), torch.randn(4, 3), torch.randn(4)]


def corrupt_isa(text: str, corruption: str) -> str:
    """The ISA file's ``text`` broken one way (``corruption``: a key of the test's ``ISA_CORRUPTIONS``)."""
    isa = json.loads(text)
    if corruption == "truncated-json":
        return text[: len(text) // 2]
    if corruption == "op-without-dtypes":
        del isa["ops"][0]["dtypes"]
    elif corruption == "unknown-dtype":
        isa["ops"][2]["dtypes"].append("float8")
    elif corruption == "duplicate-op":
        isa["ops"].append(copy.deepcopy(isa["ops"][0]))
    elif corruption == "bad-attribute-type":
        isa["ops"][5]["attributes"]["dims"]["type"] = "tensor"
    return json.dumps(isa)


def mutate_program(program: dict, mutation: str) -> dict:
    """A copy of ``program`` broken one way (``mutation``: a key of the test's ``PROGRAM_MUTATIONS``)."""
    program = copy.deepcopy(program)
    instructions = program["instructions"]
    if mutation == "unknown-op":
        instructions[1]["op"] = "fused_magic"
    elif mutation == "missing-operand":
        instructions[1]["inputs"] = ["x"]
    elif mutation == "undeclared-tensor":
        instructions[2]["inputs"] = ["xw", "bias"]
    elif mutation == "read-before-write":
        instructions[0], instructions[1] = instructions[1], instructions[0]
    elif mutation == "written-twice":
        instructions[2]["output"] = "xw"
    elif mutation == "missing-attribute":
        instructions[0]["attrs"] = {}
    elif mutation == "unknown-attribute":
        instructions[1]["attrs"] = {"transpose_b": True}
    elif mutation == "wrong-attribute-type":
        instructions[0]["attrs"] = {"dims": "1,0"}
    elif mutation == "unsupported-dtype":
        for tensor in program["tensors"].values():
            tensor["dtype"] = "int64"
    elif mutation == "mixed-dtypes":
        program["tensors"]["y"]["dtype"] = "float16"
    elif mutation == "not-an-instruction":
        instructions[2] = ["add", "xw", "b"]
    elif mutation == "too-many-operands":
        instructions[1]["inputs"] = ["x", "w_t", "x"]
    elif mutation == "bool-for-an-int":  # True is an int to Python, not to the ISA
        instructions[0] = {"op": "slice", "inputs": ["w"], "output": "w_t",
                           "attrs": {"dim": True, "start": 0, "end": 3, "step": 1}}  # fmt: skip
    return program


def isa_cases(n: int, m: int):
    """Every ISA op on a generated shape: op -> (attrs, inputs, what PyTorch computes from the inputs)."""
    x, y = torch.randn(2, n, m), torch.randn(2, n, m)
    # Rows of large magnitude, as trained models make them: exp(100) overflows float32 (a softmax must
    # subtract the row's maximum), and E[x^2] - E[x]^2 cancels catastrophically at +100 (a norm must not).
    large = torch.cat([x, 100 * x, x + 100])
    return {
        "matmul": ({}, [x, torch.randn(m, n)], lambda a, b: a @ b),
        "conv2d": (
            {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1},
            [torch.randn(1, 2, n + 2, m + 2), torch.randn(3, 2, 3, 3), torch.randn(3)],
            lambda a, w, b: torch.nn.functional.conv2d(a, w, b, padding=1),
        ),
        "add": ({}, [x, y], torch.add),
        "mul": ({}, [x, torch.randn(m)], torch.mul),
        "rsqrt": ({}, [x.abs() + 0.5], torch.rsqrt),
        "mean": ({"dims": [1, 2], "keepdim": True}, [x], lambda a: a.mean((1, 2), keepdim=True)),
        "softmax": (
            {"dim": 2, "causal": True},
            [large],
            lambda a: a.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1), float("-inf")).softmax(2),
        ),
        "layernorm": (
            {"normalized_ndim": 1, "eps": 1e-5},
            [large, torch.randn(m), torch.randn(m)],
            lambda a, w, b: torch.nn.functional.layer_norm(a, (m,), w, b, 1e-5),
        ),
        "rmsnorm": (
            {"normalized_ndim": 1, "eps": 1e-6},
            [large, torch.randn(m)],
            lambda a, w: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
        ),
        "activation": ({"function": "gelu_tanh"}, [x], lambda a: torch.nn.functional.gelu(a, approximate="tanh")),
        "reshape": ({"shape": [n, 2 * m]}, [x], lambda a: a.reshape(n, 2 * m)),
        "permute": ({"dims": [2, 0, 1]}, [x], lambda a: a.permute(2, 0, 1)),
        "slice": ({"dim": 1, "start": 1, "end": n, "step": 2}, [x], lambda a: a[:, 1:n:2]),
        "concat": ({"dim": 1}, [[x, y]], lambda ab: torch.cat(ab, 1)),
        "expand": ({"shape": [3, 2, n, m]}, [x], lambda a: a.expand(3, 2, n, m)),
    }


def single_op_program(op, attrs, inputs, expected):
    """A program of one ``op`` instruction on ``inputs`` (a list operand is a ``tensor_list``), and its flat
    inputs; the output is declared with ``expected``'s shape and dtype."""
    tensors, names = {}, []
    for i, value in enumerate(inputs):
        group = value if isinstance(value, list) else [value]
        group_names = []
        for j, tensor in enumerate(group):
            name = f"in{i}_{j}"
            tensors[name] = {"shape": list(tensor.shape), "dtype": DTYPE_NAMES[tensor.dtype]}
            group_names.append(name)
        names.append(group_names if isinstance(value, list) else group_names[0])
    tensors["out"] = {"shape": list(expected.shape), "dtype": DTYPE_NAMES[expected.dtype]}
    flat_names = [n for group in names for n in (group if isinstance(group, list) else [group])]
    program = {
        "format": "npu-program",
        "version": 1,
        "name": op,
        "tensors": tensors,
        "inputs": flat_names,
        "outputs": ["out"],
        "instructions": [{"op": op, "inputs": names, "output": "out", "attrs": attrs}],
    }
    flat_inputs = [t for v in inputs for t in (v if isinstance(v, list) else [v])]
    return program, flat_inputs


# -------------------------------------------------- partitioned graphs, run on real values (step 3)
def assert_partitioned_graph_computes(result, inputs, expected, what):
    """Run the graph partition_for_npu returned (its graph, through fx.Interpreter: what the coverage describes);
    its NPU partitions are plain submodules here, so it must compute what the original graph computed."""
    actual = run_graph(result.graph_module, *inputs)
    assert outputs_close(actual, expected, rtol=1e-6, atol=1e-6), (
        f"{what}: the partitioned graph computes something else than the graph it came from "
        f"({output_error(actual, expected)})"
    )


def real_values(gm, inputs):
    """Every node's value when ``gm`` runs on real ``inputs``."""
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            values[node.name] = result = super().run_node(node)
            return result

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return values


def returns_an_input(node, values):
    """The node's result is one of its tensor inputs, element for element (same shape and dtype)."""
    result = values[node.name]
    inputs = [values[n.name] for n in node.all_input_nodes if isinstance(values.get(n.name), torch.Tensor)]
    return isinstance(result, torch.Tensor) and any(
        t.shape == result.shape and t.dtype == result.dtype and torch.equal(t, result) for t in inputs
    )


def is_empty(value):
    """Whether ``value`` (a tensor, or a tuple of values) holds tensors, and only empty ones."""
    tensors = [value] if isinstance(value, torch.Tensor) else [v for v in value if isinstance(v, torch.Tensor)]
    return bool(tensors) and all(t.numel() == 0 for t in tensors)


# ------------------------------------------------------------------------ lowered programs (step 4)
def dynamo_graph(fn, *inputs):
    """The (first) torch-level graph Dynamo hands a backend for ``fn(*inputs)``, and its inputs."""
    torch._dynamo.reset()
    captured = capture_graphs(fn, *inputs)
    return captured.torch[0], captured.torch_inputs[0]


def op_counts(program):
    """How many instructions of each ISA op ``program`` has."""
    return collections.Counter(instruction["op"] for instruction in program["instructions"])


def isa_ops_except(*ops):
    """Every ISA op but those named: "the program emits nothing else"."""
    return set(default_isa().ops) - set(ops)


# ---------------------------------------------------- compiling through the backend (steps 4 and 5)
def compile_and_run(backend, model, *inputs, **compile_kwargs):
    """Compile ``model`` with ``backend`` from a clean Dynamo cache, run it once, return (output, coverage)."""
    torch._dynamo.reset()
    with coverage.collect() as graphs:
        output = torch.compile(model, backend=backend, **compile_kwargs)(*inputs)
    return output, graphs


def backend_for(lab, dialect):
    """The backend that hands the NPU graphs of ``dialect``: torch-level (Dynamo) or aten (AOTAutograd)."""
    return lab.npu_backend if dialect == "torch" else lab.npu_aot_backend


class RespellingBackend:
    """A backend that hands ``lab.compile_graph`` each graph of ``dialect`` with every call's arguments respelled
    (:mod:`labkit.spellings`: by name, by position with the defaults written out, or with the defaults left out).

    :attr:`respelled_calls` counts the calls the respelling changed, over every graph compiled (a test whose
    graphs had nothing to respell would prove nothing).
    """

    def __init__(self, lab, dialect: str, spelling: str) -> None:
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.aot_autograd import make_boxed_func

        self.lab, self.dialect, self.spelling, self.respelled_calls = lab, dialect, spelling, 0
        if dialect == "aten":  # inference only: the forward graph is respelled and compiled, the backward never runs
            self._backend = aot_autograd(
                fw_compiler=lambda gm, inputs: make_boxed_func(self._compile(gm, inputs)),
                bw_compiler=lambda gm, inputs: make_boxed_func(gm.forward),
            )
        else:
            self._backend = self._compile

    def _compile(self, gm, example_inputs):
        from torch._subclasses.fake_tensor import FakeTensor

        real = not any(isinstance(value, FakeTensor) for value in example_inputs)
        respelled_gm, changed = respelled(gm, self.spelling, example_inputs if real else None)
        self.respelled_calls += changed
        return self.lab.compile_graph(respelled_gm, example_inputs, dialect=self.dialect)

    def __call__(self, gm, example_inputs):
        return self._backend(gm, example_inputs)


def compiled_outputs_differing(lab, dialect, fn, forms, inputs) -> list[str]:
    """Compile ``fn`` (one output per entry of ``forms``: ``(name, expression)``) with the backend of
    ``dialect``; the names of the outputs that differ from eager, with by how much."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NpuCoverageWarning)
        with torch.no_grad():
            try:
                outputs, _ = compile_and_run(backend_for(lab, dialect), fn, *inputs)
            except ProgramError as error:
                raise AssertionError(
                    f"{dialect} graphs: the NPU was given an instruction it cannot run ({error}): "
                    "support.py must check the dtype of every operand, not only the result's"
                ) from None
    expected = fn(*inputs)
    return [
        f"{name} (off by {output_error(got, want).max_abs:.3g})"
        for (name, _), got, want in zip(forms, outputs, expected)
        if got.dtype != want.dtype or not outputs_close(got, want, rtol=TOLERANCE, atol=TOLERANCE)
    ]


def compiled_forms_off_eager(lab, dialect, forms, inputs, backend=None) -> tuple[list[str], list]:
    """Compile one function returning every form of ``forms`` (``(name, expression)``, one output each) with
    the backend of ``dialect`` (or ``backend``); the names of the forms that differ from eager (with by how
    much), and the coverage of the compile. If the compiled run raises, each form is compiled alone: a form
    that raises is named with its error (a starter's TODO, a ``NotImplementedError``, is raised as it is)."""

    def run(chosen):
        def fn(*args):
            return tuple(expression(*args) for _, expression in chosen)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NpuCoverageWarning)
            with torch.no_grad():
                outputs, graphs = compile_and_run(backend or backend_for(lab, dialect), fn, *inputs)
                expected = fn(*inputs)
        wrong = [
            f"{name} (off by {output_error(got, want).max_abs:.3g})"
            for (name, _), got, want in zip(chosen, outputs, expected)
            if got.dtype != want.dtype or not outputs_close(got, want, rtol=TOLERANCE, atol=TOLERANCE)
        ]
        return wrong, graphs

    try:
        return run(forms)
    except Exception:
        wrong, graphs = [], []
        for form in forms:
            try:
                form_wrong, form_graphs = run([form])
            except Exception as error:
                wrong.append(f"{form[0]} (the compiled run raised {what_was_raised(error)})")
            else:
                wrong, graphs = wrong + form_wrong, graphs + form_graphs
        return wrong, graphs


def what_was_raised(error: BaseException, limit: int = 300) -> str:
    """``error`` in one line, ``TypeName: the first line of its message``, naming the error the backend raised
    rather than Dynamo's wrapper around it (``BackendCompilerFailed``). A starter's TODO anywhere in its chain
    (:func:`raised_by_a_todo`) is raised again instead: an unwritten step is reported as not implemented, not
    as a wrong answer."""
    if raised_by_a_todo(error):
        raise error
    while (inner := error.__cause__ or getattr(error, "inner_exception", None)) is not None:
        error = inner
    message = (str(error).strip().splitlines() or [""])[0][:limit]
    return f"{type(error).__name__}: {message}"


def raised_by_a_todo(error: BaseException) -> bool:
    """A ``NotImplementedError`` (a starter's TODO) anywhere in ``error``'s chain (Dynamo wraps backend errors)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, NotImplementedError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


# ----------------------------------------------------------------------------- profiling (step 6)
def profiled_backend(lab, simulators: list):
    """A backend that compiles like ``lab.npu_backend``, then profiles every NPU partition, as
    ``options={"profile": True}`` does; the :class:`ProfilingSimulator` of each is appended to ``simulators``
    (each lists the programs it loaded, so a test can compare the records against them)."""
    from lab02_npu_backend.given.profiling_tools import profile_partitions

    def backend(gm, example_inputs):
        compiled = lab.npu_backend(gm, example_inputs)
        simulators.extend(profile_partitions(compiled, lab.ProfiledProgram))
        return compiled

    return backend


def instructions_run(simulators) -> list[tuple[str, int, str]]:
    """(program, index, op) of every instruction of every program the ``simulators`` loaded, in order:
    what one run records when each program runs once."""
    return [
        (program["name"], index, instruction["op"])
        for simulator in simulators
        for program in simulator.programs
        for index, instruction in enumerate(program["instructions"])
    ]


def kernels_of(lab) -> dict:
    """The selected implementation's simulator kernels (the cost model is checked on what they return)."""
    return importlib.import_module(f"{lab.__name__}.simulator").KERNELS
