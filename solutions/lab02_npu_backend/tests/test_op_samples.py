"""The OpInfo samples lab 2 grades with (``given/op_samples.py``) test what they claim to test.

- Every name in :data:`COURSE_OPS` is an OpInfo of the pinned PyTorch (an older one skips what it lacks).
- Every operator's samples reach the backend (a frame Dynamo runs eagerly would test nothing), and together
  they put every aten target of the reference's table on the NPU but those listed in :data:`NOT_REACHED`,
  each with the reason OpInfo never gives the form the reference lowers (the hand-written tests do).
- Every argument with a default of every call the tables claim reaches the support check at its default and at
  another value, but those listed in :data:`MET_AT_ONE_VALUE` with the reason; every argument without a default
  that is a setting (a dim, a shape, a flag) at two values at least, but those in :data:`SETTING_AT_ONE_VALUE`;
  and every argument changed from its default without each other at least once, but those in
  :data:`ALWAYS_SET_TOGETHER` (a check that reads one of two arguments always set together passes otherwise); and
  every number argument whose default is not 0 at 0 once, but those in :data:`NEVER_AT_ZERO` (``eps or 1e-5``).
- The reference gives eager's answer on the reference inputs too (infinities, NaN, scalars on both sides).
- Mistakes the reference once made are caught, with a message naming the call.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field

import pytest
import torch

import lab02_npu_backend.test_lab as graded
from lab02_npu_backend.given.checks import TOLERANCE
from lab02_npu_backend.given.graphs import target_name
from lab02_npu_backend.given.op_samples import COURSE_OPS, known_op_names, op_samples, samples_off_eager
from labkit.impl import load_lab
from labkit.spellings import (
    arguments_at_default,
    full_target_name,
    note_changed_together,
    number_arguments_at_zero,
    required_argument_values,
)

aten = torch.ops.aten

#: Aten targets of the reference's table no OpInfo sample puts on the NPU, and why (a hand-written test covers each).
NOT_REACHED = {
    aten.alias.default: "AOTAutograd records no alias for these samples",
    aten.reshape.default: "AOTAutograd records reshape as view or _unsafe_view",
}


@pytest.fixture(scope="module")
def reference():
    return load_lab("lab02_npu_backend", "solution")


def test_every_course_op_is_an_opinfo_of_the_pinned_pytorch():
    assert set(COURSE_OPS) <= known_op_names(), sorted(set(COURSE_OPS) - known_op_names())


#: Arguments of targets the reference's tables claim that no sample passes both at their default and at another
#: value, and why none can (every other one must be met both ways: ``test_every_argument_is_met_at_its_default_and_
#: at_another_value``). Keyed by (dialect, target name, argument).
MET_AT_ONE_VALUE = {
    ("torch", "torch._C._nn.scaled_dot_product_attention", "dropout_p"): "attention dropout draws random numbers "
    "(graded as above)",
    ("aten", "aten._scaled_dot_product_flash_attention_for_cpu.default", "dropout_p"): "attention dropout draws "
    "random numbers (graded as above)",
    ("aten", "aten._to_copy.default", "pin_memory"): "page-locked memory serves copies to a GPU; no CPU graph asks",
    ("aten", "aten._to_copy.default", "dtype"): "AOTAutograd always names _to_copy's dtype, even for a .to that "
    "changes only the memory format (x.to(memory_format=...) gives _to_copy(x, dtype=torch.float32, ...))",
    ("aten", "aten.expand.default", "implicit"): "set by autograd's own broadcasting in backward graphs only",
}


#: Targets of the reference's tables no sample asks the support check about, by dialect, and why.
NOT_ASKED: dict[str, dict[str, str]] = {
    "torch": {
        "torch.nn.functional.multi_head_attention_forward": "its 256 OpInfo samples would make a graded test of five "
        "minutes (COURSE_OPS); hand-written tests give it masks and weights",
        "torch.nn.functional.rms_norm": "Dynamo records F.rms_norm as torch.rms_norm, which the samples reach",
    },
    "aten": {str(target): reason for target, reason in NOT_REACHED.items()},
}


@dataclass
class CompiledSamples:
    """What the samples of every course operator did when the reference compiled them in one dialect."""

    wrong: list[str] = field(default_factory=list)
    silent: list[str] = field(default_factory=list)
    on_npu: set[str] = field(default_factory=set)
    #: the targets of the tables the support check was asked about.
    asked: set = field(default_factory=set)
    #: target name -> argument -> the kinds of value the support table was asked about ("default", "another").
    met: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    #: target name -> argument without a default -> the values it was asked about (graph values as "<value>").
    settings: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    #: target name -> argument -> the arguments changed from their defaults in every call that changes it.
    partners: dict[str, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(dict))
    #: target name -> the number arguments with a default other than 0 the support table was asked about, and
    #: those it was asked about at 0.
    numbers: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    at_zero: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


def _record_arguments(node: torch.fx.Node, result: CompiledSamples) -> None:
    """Each argument of ``node``'s call that has a default: at it, or at another value
    (:func:`labkit.spellings.arguments_at_default`), and which others are changed with it; each argument without a
    default: its value (:func:`labkit.spellings.required_argument_values`). A call whose signature cannot be told
    records nothing: methods torch has no function for (``x.view``, ``x.to``, ``x.contiguous``), methods whose own
    spelling does not bind their function's (``x.permute(0, 2, 1)``)."""
    target = full_target_name(node.target)
    at_default = arguments_at_default(node) or {}
    for name, default in at_default.items():
        result.met[target][name].add("default" if default else "another")
    note_changed_together(result.partners[target], at_default)
    for name, value in (required_argument_values(node) or {}).items():
        result.settings[target][name].add(value)
    for name, zero in (number_arguments_at_zero(node) or {}).items():
        result.numbers[target].add(name)
        if zero:
            result.at_zero[target].add(name)


@pytest.fixture(scope="module", params=["torch", "aten"])
def compiled_samples(reference, request):
    """Every course operator's samples compiled by the reference in the dialect ``request.param``, each support
    question recorded (the arguments of every call its tables claim)."""
    dialect, result = request.param, CompiledSamples()
    claimed = reference.support.TABLES[dialect]
    asked = reference.support.NpuOperatorSupport.fallback_reason

    def recording(self, node):
        if node.op in ("call_function", "call_method") and isinstance(node.target, Hashable) and node.target in claimed:
            result.asked.add(node.target)
            _record_arguments(node, result)
        return asked(self, node)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reference.support.NpuOperatorSupport, "fallback_reason", recording)
        for name in COURSE_OPS:
            wrong, graphs = samples_off_eager(reference, dialect, op_samples([name]), tolerance=TOLERANCE)
            result.wrong += wrong
            if not graphs:
                result.silent.append(name)
            result.on_npu |= {decision.op for graph in graphs for decision in graph.decisions if decision.on_npu}
    return dialect, result


def test_every_operators_samples_reach_the_backend_and_the_npu(reference, compiled_samples):
    dialect, result = compiled_samples
    assert not result.wrong, result.wrong
    silent = result.silent
    assert not silent, f"these operators' samples never reached the backend (Dynamo ran them eagerly): {silent}"
    if dialect == "aten":
        expected = {str(target) for target in reference.ATEN_SUPPORT if target not in NOT_REACHED}
        assert expected <= result.on_npu, f"no sample puts these on the NPU: {sorted(expected - result.on_npu)}"
        reached_anyway = {str(target) for target in NOT_REACHED} & result.on_npu
        assert not reached_anyway, f"NOT_REACHED lists targets the samples do reach: {sorted(reached_anyway)}"


def test_every_target_the_tables_claim_is_asked_about(reference, compiled_samples):
    """Every target of the reference's tables reaches its support check through some sample (so its arguments are
    audited below), but those NOT_ASKED names with the reason."""
    dialect, result = compiled_samples
    claimed = set(reference.support.TABLES[dialect])
    never = {full_target_name(target) for target in claimed - result.asked}
    unexplained = sorted(never - set(NOT_ASKED[dialect]))
    assert not unexplained, f"no sample asks the support check about these targets: {unexplained}"
    stale = sorted(set(NOT_ASKED[dialect]) - never)
    assert not stale, f"NOT_ASKED lists targets the samples now reach: {stale}"


def test_every_argument_is_met_at_its_default_and_at_another_value(compiled_samples):
    """Read from the operators' signatures, not from a list of cases: every argument with a default, of every call
    the support table is asked about, reaches it once left at its default and once at another value (OpInfo's
    samples and the lab's WRITTEN_SAMPLES), so a support check that ignores the argument, or reads it only by
    position, accepts a call its lowering then gets wrong. Those that cannot are listed in MET_AT_ONE_VALUE with the
    reason.

    What this does not see: calls without a readable signature (:func:`_record_arguments`), arguments without a
    default in the overload the call binds (``torch.div``'s ``rounding_mode``: its own OpInfos move it), operators
    no sample reaches, and whether the reference accepted the call (a value the reference refuses is still one a
    student's check is offered)."""
    dialect, result = compiled_samples
    at_one_value = {
        (dialect, target, argument): sorted({"default", "another"} - kinds)
        for target, arguments in result.met.items()
        for argument, kinds in arguments.items()
        if kinds != {"default", "another"}
    }
    unexplained = {key: never for key, never in at_one_value.items() if key not in MET_AT_ONE_VALUE}
    assert not unexplained, (
        f"arguments the samples never pass at (target, argument: never): {unexplained}; add a call to "
        "WRITTEN_SAMPLES in given/op_samples.py, or say in MET_AT_ONE_VALUE why none can be compared"
    )
    listed_here = {key for key in MET_AT_ONE_VALUE if key[0] == dialect}
    stale = sorted(listed_here - set(at_one_value))
    assert not stale, f"MET_AT_ONE_VALUE lists arguments the samples now meet both ways: {stale}"


#: Arguments without a default of targets the tables claim that the samples pass at one value only, and why no
#: other can be compared. Keyed like MET_AT_ONE_VALUE.
SETTING_AT_ONE_VALUE: dict[tuple[str, str, str], str] = {
    ("aten", "aten._softmax.default", "half_to_float"): "True only where a CUDA kernel turns half into float: the "
    "CPU's _softmax refuses it",
}

_IMPLICIT_DIM = "dim=None is PyTorch's deprecated implicit choice: a call that sets another argument names dim"
_DTYPE_ALWAYS_NAMED = "AOTAutograd names _to_copy's dtype in every call it records, even one that keeps it"
#: Arguments the samples change from their defaults only together with others, and why. Keyed like MET_AT_ONE_VALUE.
ALWAYS_SET_TOGETHER: dict[tuple[str, str, str], str] = {
    ("torch", "torch.nn.functional.softmax", "dtype"): _IMPLICIT_DIM,
    ("torch", "torch.nn.functional.softmax", "_stacklevel"): _IMPLICIT_DIM,
    ("torch", "torch.nn.functional.dropout", "inplace"): "dropout draws random numbers unless training=False, which "
    "changes training too (graded as above)",
    **{("aten", "aten._to_copy.default", name): _DTYPE_ALWAYS_NAMED
       for name in ("layout", "device", "non_blocking", "memory_format")},
}  # fmt: skip


def test_every_setting_without_a_default_is_met_at_two_values(compiled_samples):
    """aten's schemas give many settings no default (``aten.convolution``'s ``transposed`` and ``groups``, the dims
    of ``transpose.int``, ``view``'s shape): a support check that reads one wrongly passes samples that hold it at
    one value. Graph values (``"<value>"``) are no settings; ``None`` beside a tensor is two values."""
    dialect, result = compiled_samples
    once = {
        (dialect, target, name): values[0]
        for target, settings in result.settings.items()
        for name, values in ((name, sorted(values)) for name, values in settings.items())
        if len(values) == 1 and values != ["<value>"]
    }
    unexplained = {key: value for key, value in once.items() if key not in SETTING_AT_ONE_VALUE}
    assert not unexplained, (
        f"settings without a default the samples pass at one value only ((dialect, target, setting): the value): "
        f"{unexplained}; add a call to WRITTEN_SAMPLES in given/op_samples.py, or say in SETTING_AT_ONE_VALUE why "
        "none can be compared"
    )
    stale = sorted({key for key in SETTING_AT_ONE_VALUE if key[0] == dialect} - set(once))
    assert not stale, f"SETTING_AT_ONE_VALUE lists settings the samples now meet at two values: {stale}"


def test_every_argument_is_changed_without_each_other_at_least_once(compiled_samples):
    """``addmm``'s ``beta`` and ``alpha``: a check that reads one of two arguments always changed together passes
    every sample that changes both."""
    dialect, result = compiled_samples
    together = {
        (dialect, target, name): sorted(others)
        for target, partners in result.partners.items()
        for name, others in partners.items()
        if others
    }
    unexplained = {key: others for key, others in together.items() if key not in ALWAYS_SET_TOGETHER}
    assert not unexplained, (
        f"arguments the samples change only together with others ((dialect, target, argument): the others): "
        f"{unexplained}; add a call to WRITTEN_SAMPLES in given/op_samples.py, or say in ALWAYS_SET_TOGETHER why"
    )
    stale = sorted({key for key in ALWAYS_SET_TOGETHER if key[0] == dialect} - set(together))
    assert not stale, f"ALWAYS_SET_TOGETHER lists arguments the samples now change alone: {stale}"


#: Number arguments with a default other than 0 of targets the tables claim that no sample passes at 0, and why none
#: can be compared. Keyed like MET_AT_ONE_VALUE.
NEVER_AT_ZERO: dict[tuple[str, str, str], str] = {}


def test_every_number_argument_is_met_at_zero(compiled_samples):
    """``eps or 1e-5``, ``scale or 1 / sqrt(d)``, ``alpha or 1`` read 0 as "not given": a number argument whose
    default is not 0 must reach the support check at 0 once (``layer_norm(eps=0.0)``, ``sdpa(scale=0.0)``), or a
    lowering that reads it so passes every sample."""
    dialect, result = compiled_samples
    never = {
        (dialect, target, name) for target, names in result.numbers.items() for name in names - result.at_zero[target]
    }
    unexplained = sorted(never - set(NEVER_AT_ZERO))
    assert not unexplained, (
        f"number arguments the samples never pass at 0 ((dialect, target, argument)): {unexplained}; add a call to "
        "WRITTEN_SAMPLES in given/op_samples.py, or say in NEVER_AT_ZERO why none can be compared"
    )
    stale = sorted({key for key in NEVER_AT_ZERO if key[0] == dialect} - never)
    assert not stale, f"NEVER_AT_ZERO lists arguments the samples now pass at 0: {stale}"


@pytest.mark.parametrize("dialect", ["torch", "aten"])
def test_the_reference_gives_eagers_answer_on_the_reference_inputs_of_arithmetic(reference, dialect):
    """Scalars on both sides (``add(2.0, 3.0)`` is a call on numbers alone: it stays on the host), infinities."""
    samples = op_samples(["add", "sub", "mul", "div.no_rounding_mode", "pow", "rsqrt", "tanh"], reference_inputs=True)
    wrong, _ = samples_off_eager(reference, dialect, samples, tolerance=TOLERANCE)
    assert not wrong, wrong


def test_dims_wrapped_by_the_rank_alone_fail_on_a_0_dim_tensor(reference, monkeypatch):
    """``dim % ndim`` divides by zero on a 0-dim tensor, whose dims 0 and -1 PyTorch accepts."""
    few = functools.partial(op_samples, ["mean", "softmax", "transpose"])
    monkeypatch.setattr(graded, "op_samples", few)
    graded.test_every_sample_pytorch_tests_its_operators_with_gives_eagers_answer(reference, "aten")
    monkeypatch.setattr(reference.lowering, "_wrapped", lambda dim, ndim: int(dim) % ndim)
    with pytest.raises(AssertionError, match=r"mean\(Tensor\[\], dim=.*ZeroDivisionError.*support.py must refuse"):
        graded.test_every_sample_pytorch_tests_its_operators_with_gives_eagers_answer(reference, "aten")


def test_a_check_that_reads_the_input_by_position_alone_fails_on_a_call_that_names_it(reference, monkeypatch):
    """``torch.div(input=x, other=2.0)`` is a call a model may write: a support check reading ``node.args[0]``
    raises on it (the reference's division check and the given ``pow_check`` once did)."""
    few = functools.partial(op_samples, ["div.no_rounding_mode", "mul"])  # mul: something on the NPU
    monkeypatch.setattr(graded, "op_samples", few)
    graded.test_every_sample_pytorch_tests_its_operators_with_gives_eagers_answer(reference, "torch")
    by_position = lambda node: None if isinstance(node.args[0], torch.fx.Node) else "a number"  # noqa: E731
    monkeypatch.setitem(reference.support.CONSTRAINTS, torch.div, by_position)
    with pytest.raises(AssertionError, match=r"div\(Tensor.*\[spelled: keywords\] \(raised IndexError"):
        graded.test_every_sample_pytorch_tests_its_operators_with_gives_eagers_answer(reference, "torch")


def test_target_names_are_what_the_coverage_records():
    """The aten check above compares ``str(target)`` with the coverage's op names: they must be one spelling."""

    class Node:
        op, target = "call_function", aten.add.Tensor

    assert target_name(Node()) == str(aten.add.Tensor)


def test_loading_the_samples_leaves_torch_backends_flags_settable():
    """PyTorch's test utilities freeze ``torch.backends``' flags on import; a lab that sets one after the OpInfo
    test ran in the same process (``torch.backends.mkldnn.enabled = ...``) must not raise."""
    op_samples(["neg"])
    assert not torch.backends.flags_frozen()
    enabled = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = enabled
