"""A script run on an unfinished starter says, in one line, which handout step to finish first."""

import pytest
import torch

from labkit.labspec import load_lab_spec
from labkit.step_summary import step_to_finish_first

LAB03 = "lab03_triton_lowering"


def todo_error(call) -> BaseException:
    with pytest.raises(NotImplementedError) as caught:
        call()
    return caught.value


def test_the_step_comes_from_the_todo_or_else_from_the_file():
    import lab03_triton_lowering as starter
    from lab03_triton_lowering import kernel

    spec = load_lab_spec(LAB03)
    line = step_to_finish_first(todo_error(starter.install_lowering), spec)
    assert line.startswith("lab03: finish step 5 first (The lowering")
    assert line.endswith("its tests: nox -s lab03 -- --step 5") and "lowering.py:" in line
    assert "finish step 1 first" in step_to_finish_first(todo_error(lambda: kernel.launch_config(8)), spec)
    wrapped = RuntimeError("the backend failed")
    wrapped.__cause__ = todo_error(starter.install_lowering)
    assert "finish step 5 first" in step_to_finish_first(wrapped, spec), "the cause of a wrapped error counts"
    assert step_to_finish_first(NotImplementedError("aten::frob on Meta"), spec) is None, "PyTorch's own is not a TODO"


def test_lab03_benchmark_on_the_starter_ends_in_one_line_naming_step_1(monkeypatch, capsys):
    """On a GPU the starter's first call raises its TODO; the benchmark says which step, no traceback."""
    from lab03_triton_lowering.given import benchmark

    monkeypatch.setenv("LABKIT_IMPL", "student")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # What the first timing does on a GPU, on CPU tensors: call the lab's kernel.
    monkeypatch.setattr(benchmark, "measure_shape", lambda lab, shape, dtype: lab.layernorm_gelu(torch.ones(2, 8)))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "a GPU")
    with pytest.raises(SystemExit) as stopped:
        benchmark.main(["--quick", "--out", "unused"])
    assert stopped.value.code == 3  # labkit.unfinished.UNFINISHED_EXIT, as every lab command
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("the kernel benchmark: lab03: finish step 1 first"), err
