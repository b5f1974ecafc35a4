"""Every argument of every call a lab 1 pass rewrites is met in the graded tests at its default and at another value.

The plugin ``argument_audit.py`` records, while lab 1's visible and held-out tests run the reference, what each
pass that rewrites particular calls (Conv+BN folding, Linear+GELU fusion, the oneDNN lowering, the algebraic
simplifier, the op replacer) was given and which targets it removed. A pass that removed a target *claims* it:
every argument of that target that has a default (a function's parameter, a module's configuration) is a case
its tests should try both at the default and at another value, or a student's pass that ignores the argument
(folds a BatchNorm without bias as if it had one, fuses a GELU whatever its ``approximate``) passes every test.

An argument met one way only fails the test unless :data:`MET_AT_ONE_VALUE` lists it with the reason it cannot
change what the pass must do. Two more checks read the same record:

- a setting without a default (aten's ``convolution`` takes ``stride``, ``transposed``, ``groups`` all by
  position, with no default) is met at two values at least (:data:`SETTING_AT_ONE_VALUE` lists the exceptions);
- an argument changed from its default is changed without each other argument at least once: always set
  together, a check that reads one of them for both passes (``addmm``'s ``beta`` and ``alpha``;
  :data:`ALWAYS_SET_TOGETHER` lists the exceptions).

It grades the lab's whole suite once: about 3 minutes on two cores.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labkit.labspec import COURSE_ROOT

LAB = COURSE_ROOT / "lab01_fx_passes"
PLUGIN = "solutions.lab01_fx_passes.tests.argument_audit"

_EVAL_ONLY = "momentum updates the running statistics in training, which the fold refuses: eval never reads it"
_NO_MODE = "computes the same in training and in eval mode"
_EVERY_DIMENSION = (
    "the fold reads a BatchNorm's mode, weight, bias and statistics alike in every dimension: BatchNorm2d meets "
    "it both ways"
)
_LIKE_FORMS = {
    "layout": "only dense (torch.strided) tensors reach these graphs: a sparse zeros_like is no dense identity",
    "device": "the graded tests run on the CPU: a tensor made on another device needs one",
    "pin_memory": "pinned memory changes where a tensor lives, not a value the identity is judged on",
    "memory_format": "the simplifier judges every identity by its result's strides on a run (strided_slice)",
}

_DROPPED = (
    "the replacement takes the input alone (test_replace_ops_gives_the_replacement_the_input_alone): the original's "
    "other arguments are dropped whatever their values"
)
_IN_PLACE_ALIKE = "op_name reads the in-place forms of every activation alike; ReLU's and SiLU's are met both ways"

#: (pass, target, argument) -> why its tests need not meet it at a second value.
MET_AT_ONE_VALUE: dict[tuple[str, str, str], str] = {
    ("ConvBNFuser", "torch.nn.functional.batch_norm", "momentum"): _EVAL_ONLY,
    **{("ConvBNFuser", f"torch.nn.modules.batchnorm.BatchNorm{n}d", "momentum"): _EVAL_ONLY for n in (1, 2, 3)},
    **{
        ("ConvBNFuser", f"torch.nn.modules.batchnorm.BatchNorm{n}d", argument): _EVERY_DIMENSION
        for n in (1, 3)
        for argument in ("affine", "bias", "track_running_stats", "training")
    },
    ("LinearGeluFuser", "torch.nn.modules.linear.Linear", "training"): _NO_MODE,
    ("LinearGeluFuser", "torch.nn.modules.activation.GELU", "training"): _NO_MODE,
    ("AlgebraicSimplifier", "aten.sub.Tensor", "alpha"): "x - alpha * 0 is x whatever alpha is: no identity reads it",
    **{
        ("OpReplacer", target, argument): _DROPPED
        for target, argument in (
            ("aten.elu.default", "alpha"),
            ("aten.elu.default", "scale"),
            ("aten.elu.default", "input_scale"),
            ("aten.gelu.default", "approximate"),
            ("torch._C._nn.gelu", "approximate"),
            ("torch.nn.functional.elu", "alpha"),
            ("torch.nn.modules.activation.ELU", "alpha"),
        )
    },  # fmt: skip
    ("OpReplacer", "torch.nn.functional.elu", "inplace"): _IN_PLACE_ALIKE,
    ("OpReplacer", "torch.nn.modules.activation.ELU", "inplace"): _IN_PLACE_ALIKE,
    ("OpReplacer", "torch.nn.modules.activation.ELU", "training"): _NO_MODE,
    **{
        ("AlgebraicSimplifier", f"{prefix}{like}", argument): why
        for prefix, suffix in (("torch.", ""), ("aten.", ".default"))
        for like in (f"zeros_like{suffix}", f"ones_like{suffix}", f"full_like{suffix}")
        for argument, why in _LIKE_FORMS.items()
    },
}


_ONE_SPELLING = "make_fx writes pin_memory=False beside any dtype it writes out: one call's spelling, not two settings"

#: (pass, target, setting) -> why its tests need not meet it at a second value.
SETTING_AT_ONE_VALUE: dict[tuple[str, str, str], str] = {
    **{
        ("ConvBNFuser", f"aten.{norm}.default", "momentum"): _EVAL_ONLY
        for norm in ("_native_batch_norm_legit_no_training", "batch_norm", "native_batch_norm")
    },
    ("ConvBNFuser", "aten.batch_norm.default", "cudnn_enabled"): "which kernel computes it, not what it computes",
    ("LinearGeluFuser", "aten.permute.default", "dims"): (
        "a Linear's weight is 2-D: [1, 0] is its one transpose (permute(w, [0, 1]) is w, in no graph of a Linear)"
    ),
    ("OneDNNLowering", "aten.convolution.default", "output_padding"): (
        "only a transposed convolution reads it, and the lowering refuses those (leaves_a_transposed_convolution_alone)"
    ),
    ("AlgebraicSimplifier", "torch.mul", "other"): (
        "an operand, not a setting: NOT_IDENTITIES and HIDDEN state which numbers are the identity's; the held-out "
        "torch.mul(c, 1.0) is a call whose overload the audit cannot tell"
    ),
}

#: (pass, target, argument) -> why the tests need not change it without the arguments it is always changed with.
ALWAYS_SET_TOGETHER: dict[tuple[str, str, str], str] = {
    **{
        ("AlgebraicSimplifier", f"aten.{like}.default", "dtype"): _ONE_SPELLING
        for like in ("zeros_like", "ones_like", "full_like")
    },
    **{
        ("ConvBNFuser", "torch.nn.modules.batchnorm.BatchNorm2d", argument): (
            "one setting: a BatchNorm module has a bias exactly when it is affine"
        )
        for argument in ("affine", "bias")
    },
    ("OneDNNLowering", "torch.nn.modules.conv.Conv2d", "padding_mode"): (
        "a padding mode pads nothing without a padding: it cannot be changed alone"
    ),
}


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    """The audit of one run of lab 1's visible and held-out tests on the reference (CPU tests only)."""
    record = tmp_path_factory.mktemp("audit") / "audit.json"
    command = [sys.executable, "-m", "pytest", str(LAB / "test_lab.py"), str(LAB / "heldout"), "-q", "--tb=line",
               "-p", "no:cacheprovider", "-p", PLUGIN, "--argument-audit", str(record), "--impl=solution",
               "-m", "not gpu"]  # fmt: skip
    run = subprocess.run(command, cwd=COURSE_ROOT, capture_output=True, text=True, timeout=1800, check=False)
    assert run.returncode == 0, f"lab 1's tests failed on the reference under the audit:\n{run.stdout[-3000:]}"
    return json.loads(record.read_text())


def met_at_one_value(audit: dict) -> dict[tuple[str, str, str], str]:
    """(pass, target, argument) -> the one way it was met, for every argument of every target a pass removed."""
    once = {}
    for pass_name, record in audit.items():
        for target in record["removed"]:
            for argument, ways in record["met"].get(target, {}).items():
                if len(ways) == 1:
                    once[pass_name, target, argument] = ways[0]
    return once


def assert_all_listed(found: dict[tuple[str, str, str], object], listed: dict, what: str) -> None:
    """Every key of ``found`` is in ``listed`` (with its reason); else a failure listing the others, ``what``
    saying what they are and what their values mean."""
    unlisted = {key: value for key, value in found.items() if key not in listed}
    assert not unlisted, f"{len(unlisted)} {what}:\n" + "\n".join(f"  {k}: {v}" for k, v in sorted(unlisted.items()))


def test_every_argument_of_every_rewritten_call_is_met_at_its_default_and_at_another_value(audit):
    assert any(record["removed"] for record in audit.values()), "the audit saw no pass remove anything"
    assert_all_listed(
        met_at_one_value(audit),
        MET_AT_ONE_VALUE,
        "arguments of calls lab 1's passes rewrite are met at one value only in its tests ((pass, target, "
        "argument): the value met, 'default' or 'another')",
    )


def test_every_listed_argument_is_still_met_at_one_value_only(audit):
    """A listed argument the tests now meet both ways (or that no pass claims any more) leaves the list."""
    stale = sorted(set(MET_AT_ONE_VALUE) - set(met_at_one_value(audit)))
    assert not stale, f"MET_AT_ONE_VALUE lists arguments the tests meet both ways, or no pass claims: {stale}"


def settings_at_one_value(audit: dict) -> dict[tuple[str, str, str], str]:
    """(pass, target, setting) -> its one value, for every setting without a default of every removed target."""
    once = {}
    for pass_name, record in audit.items():
        for target in record["removed"]:
            for setting, values in record["values"].get(target, {}).items():
                if len(values) == 1 and values != ["<value>"]:  # a tensor always given is a graph value, no setting
                    once[pass_name, target, setting] = values[0]
    return once


def always_set_together(audit: dict) -> dict[tuple[str, str, str], list[str]]:
    """(pass, target, argument) -> the arguments changed from their defaults in every call that changes it."""
    together = {}
    for pass_name, record in audit.items():
        for target in record["removed"]:
            for argument, partners in record["partners"].get(target, {}).items():
                if partners:
                    together[pass_name, target, argument] = partners
    return together


def test_every_setting_without_a_default_is_met_at_two_values(audit):
    assert_all_listed(
        settings_at_one_value(audit),
        SETTING_AT_ONE_VALUE,
        "settings without a default, of calls lab 1's passes rewrite, are met at one value only in its tests "
        "((pass, target, setting): the value)",
    )


def test_every_argument_is_changed_without_each_other_at_least_once(audit):
    assert_all_listed(
        always_set_together(audit),
        ALWAYS_SET_TOGETHER,
        "arguments of calls lab 1's passes rewrite are changed from their defaults only together with others "
        "((pass, target, argument): the others)",
    )


def test_every_listed_setting_and_pair_still_needs_its_entry(audit):
    """An entry the tests no longer need (met at two values, changed alone, or not claimed) leaves its list."""
    stale = sorted(set(SETTING_AT_ONE_VALUE) - set(settings_at_one_value(audit)))
    stale += sorted(set(ALWAYS_SET_TOGETHER) - set(always_set_together(audit)))
    assert not stale, f"SETTING_AT_ONE_VALUE or ALWAYS_SET_TOGETHER lists what the tests no longer need: {stale}"
