"""The student/solution switch."""

import pytest

from labkit import impl


def test_module_name_maps_solution_under_solutions_package():
    assert impl.module_name("lab01_fx_passes", "student") == "lab01_fx_passes"
    assert impl.module_name("lab01_fx_passes", "solution") == "solutions.lab01_fx_passes"


def test_environment_variable_selects_impl(monkeypatch):
    monkeypatch.setenv(impl.IMPL_ENV_VAR, "solution")
    assert impl.module_name("lab02_npu_backend") == "solutions.lab02_npu_backend"


def test_bad_impl_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(impl.IMPL_ENV_VAR, "teacher")
    with pytest.raises(ValueError, match="LABKIT_IMPL='teacher'"):
        impl.selected_impl()
    with pytest.raises(ValueError, match="impl='x'"):
        impl.module_name("lab01_fx_passes", "x")
