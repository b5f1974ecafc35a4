"""Lab 3's GPU benchmark, checked without a GPU: it refuses misnamed candidates and judges targets with their noise."""

from __future__ import annotations

import json

import pytest
import torch
from torch._inductor import config as inductor_config

from lab03_triton_lowering.given import benchmark
from labkit.bench import INCONCLUSIVE, MET, MISSED, Timing
from labkit.impl import load_lab


def test_compile_plus_lowering_is_refused_when_the_lowering_replaced_nothing():
    # A compile that never runs Inductor's passes (here the eager backend) replaces nothing: its time
    # would be reported as "compile + lowering" although the lab's kernel never ran.
    lab = load_lab("lab03_triton_lowering", "solution")
    example = benchmark.make_inputs((4, 32), torch.float32, device="cpu")
    before = inductor_config.post_grad_custom_post_pass
    with pytest.raises(benchmark.CandidateError, match="replaced 0 sites"):
        benchmark.compiled_with_lowering(lab, example, backend="eager")
    assert inductor_config.post_grad_custom_post_pass is before, "the lowering must be uninstalled even when refused"


def timing(median_ms: float, spread: float) -> Timing:
    """Nine samples around ``median_ms``, their interquartile range ``2 * spread`` wide (relative)."""
    return Timing.from_ms([median_ms * (1 + spread * k / 2) for k in (-4, -3, -2, -1, 0, 1, 2, 3, 4)])


def synthetic_results(fused_ms: float, spread: float) -> list[benchmark.ShapeResult]:
    """Every d of the sweep: eager 1.0 ms, torch.compile 0.6 ms, the fused kernel ``fused_ms``, the copy 0.25 ms."""
    rows = benchmark.SPEC_SHAPE[0] * benchmark.SPEC_SHAPE[1]
    results = []
    for d in benchmark.SWEEP_D:
        times = {
            "eager": timing(1.0, spread),
            "torch.compile": timing(0.6, spread),
            "fused kernel": timing(fused_ms, spread),
            "compile + lowering": timing(fused_ms, spread),
        }
        results.append(benchmark.ShapeResult((rows, d), 4 * rows * d, 4 * rows * d, times, timing(0.25, spread)))
    return results


SMALL = {"eager": timing(0.02, 0.01), "fused kernel": timing(0.03, 0.01)}


def verdict_of(verdicts: benchmark.Verdicts, start: str) -> str:
    return next(row["verdict"] for row in verdicts.rows if row["target"].startswith(start))


def test_targets_are_met_or_missed_only_when_the_noise_cannot_flip_them():
    quiet_fast = benchmark.judge(synthetic_results(0.3, spread=0.02), SMALL)
    assert verdict_of(quiet_fast, "d=4096: fused >= 1.8x") == MET  # 3.3x, tight
    assert verdict_of(quiet_fast, "d=4096: fused >= 80%") == MET  # 0.25 / 0.3 = 83%
    assert verdict_of(quiet_fast, "[4096, 768]") == MET  # 1.5x the eager time
    quiet_slow = benchmark.judge(synthetic_results(0.7, spread=0.02), SMALL)
    assert verdict_of(quiet_slow, "d=4096: fused >= 1.8x") == MISSED  # 1.4x, tight
    assert verdict_of(quiet_slow, "d=1024: fused >= 1.0x torch.compile") == MISSED
    noisy = benchmark.judge(synthetic_results(0.55, spread=0.4), SMALL)  # 1.8x, give or take 40%
    assert verdict_of(noisy, "d=4096: fused >= 1.8x") == INCONCLUSIVE


def test_report_writes_the_json_and_both_charts(tmp_path, capsys):
    payload = benchmark.report(synthetic_results(0.3, spread=0.02), SMALL, dtype="float16", out=tmp_path)
    assert (tmp_path / "spec_latency.png").stat().st_size > 0 and (tmp_path / "sweep_speedup.png").stat().st_size > 0
    written = json.loads((tmp_path / "benchmark.json").read_text())
    assert [s["shape"][-1] for s in written["shapes"]] == list(benchmark.SWEEP_D)
    assert {row["verdict"] for row in payload["verdicts"]} <= {MET, MISSED, INCONCLUSIVE}
    assert "interquartile" in capsys.readouterr().out
