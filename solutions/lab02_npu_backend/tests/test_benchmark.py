"""Lab 2's benchmark script gives verdicts the noise cannot flip (timings injected, nothing timed)."""

import json

from lab02_npu_backend.given import benchmark as lab02_benchmark
from lab02_npu_backend.given.models import STANDARD_MODELS
from labkit.bench import INCONCLUSIVE, MET, MISSED, Timing


def timing_ms(*samples_ms: float) -> Timing:
    return Timing.from_ms(samples_ms)


def test_lab02_an_outlier_inflated_eager_median_gives_no_yes():
    """The issue's batch-1 run: eager median 103.8 ms against a minimum of 1.5 ms read as '1.31x <= 1.5x yes'."""
    eager = timing_ms(1.5, 103.8, 110, 1.6, 120, 103.8, 1.5, 98, 104)
    npu = timing_ms(2.9, 136, 3.1, 140, 3.0, 150, 136, 2.8, 130)
    row = lab02_benchmark.latency_verdict(eager, npu)
    assert npu.median_s / eager.median_s < lab02_benchmark.LATENCY_TARGET, "the old verdict would have been yes"
    assert row == INCONCLUSIVE


def test_lab02_a_steady_run_gets_a_verdict():
    eager = timing_ms(1.50, 1.52, 1.49, 1.51, 1.50, 1.53)
    assert lab02_benchmark.latency_verdict(eager, timing_ms(2.0, 2.02, 1.99, 2.01, 2.0, 2.03)) == MET
    assert lab02_benchmark.latency_verdict(eager, timing_ms(3.0, 3.02, 2.99, 3.01, 3.0, 3.03)) == MISSED


# -- The script end to end, on the reference, in its smallest form (wiring, not speed) -----------
def test_lab02_benchmark_writes_timings_with_spread_and_a_verdict(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_IMPL", "solution")
    assert lab02_benchmark.main(["--repeats", "5", "--threads", "1", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "benchmark.json").read_text())
    batch1 = document["latency"]["batch1"]
    assert len(batch1["eager"]["samples_s"]) == 5 and batch1["verdict"] in (MET, MISSED, INCONCLUSIVE)
    assert set(document["coverage"]) == set(STANDARD_MODELS)
    assert (tmp_path / "latency.png").stat().st_size > 0
    assert "npu / eager" in capsys.readouterr().out
