"""The labs' benchmark scripts give verdicts the noise cannot flip (timings injected, nothing timed)."""

import pytest

from lab01_fx_passes import benchmark as lab01_benchmark
from lab02_npu_backend import benchmark as lab02_benchmark
from lab02_npu_backend.models import STANDARD_MODELS
from labkit.bench import INCONCLUSIVE, MET, MISSED, Timing


def timing_ms(*samples_ms: float) -> Timing:
    return Timing.from_ms(samples_ms)


def lab01_batch(original, pipeline, ofi):
    b = lab01_benchmark
    return {
        b.TARGET_BATCH: {b.BASELINE: original, b.PIPELINE: pipeline, "fx.fuse": original, b.OPTIMIZE_FOR_INFERENCE: ofi}
    }


def lab01_accuracy(disagreements: int, images: int) -> dict:
    return {lab01_benchmark.PIPELINE: {"images": images, "disagreements": disagreements,
                                       "top1_agreement": 1 - disagreements / images}}  # fmt: skip


def verdicts(targets) -> list[str]:
    return [target.verdict for target in targets]


def test_lab01_a_clear_speedup_is_met_and_parity_is_inconclusive():
    original = timing_ms(430, 432, 428, 431, 435, 429, 433)
    pipeline = timing_ms(310, 311, 309, 312, 310, 308, 313)
    ofi = timing_ms(309, 313, 308, 310, 311, 312, 309)
    targets = lab01_benchmark.check_targets(lab01_batch(original, pipeline, ofi), lab01_accuracy(0, 1000))
    assert verdicts(targets) == [MET, INCONCLUSIVE, MET]
    assert targets[0].measured == "1.387x [1.384-1.391]"


def test_lab01_an_outlier_inflated_original_decides_nothing():
    """The issue's --quick run: the original's median 3,299 ms against a minimum of 656 ms."""
    original = timing_ms(656, 3299, 3350, 700, 3100, 690, 3299)
    pipeline = timing_ms(600, 640, 3000, 610, 2900, 2800, 620)
    ofi = timing_ms(606, 620, 605, 2950, 615, 612, 3000)
    targets = lab01_benchmark.check_targets(lab01_batch(original, pipeline, ofi), lab01_accuracy(0, 1000))
    assert verdicts(targets)[:2] == [INCONCLUSIVE, INCONCLUSIVE]


@pytest.mark.parametrize(
    "disagreements, images, expected",
    [
        (0, 1000, MET),
        (1, 1000, MET),
        (2, 1000, MISSED),
        (2, 256, MISSED),
        (0, 256, "inconclusive"),
        (1, 64, "inconclusive"),
    ],
)
def test_lab01_agreement_is_decided_on_the_spec_set_only(disagreements, images, expected):
    """>= 99.9% of 1,000 images allows one disagreement; a shorter run can only prove a miss."""
    assert lab01_benchmark.agreement_verdict(disagreements, images).startswith(expected)


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


# -- The scripts end to end, on the reference, in their smallest form (wiring, not speed) -----------
def test_lab01_benchmark_writes_timings_with_spread_targets_and_a_chart(tmp_path, monkeypatch, capsys):
    """The whole script on a small ResNet (ResNet-50 takes minutes): every table, the JSON and the PNG."""
    from lab01_fx_passes.models import TinyResNet, randomize_batch_norm

    monkeypatch.setenv("LABKIT_IMPL", "solution")
    monkeypatch.setattr(lab01_benchmark, "build_resnet50", lambda weights: randomize_batch_norm(TinyResNet(), 0).eval())
    payload = lab01_benchmark.main(["--images", "8", "--accuracy-batch", "4", "--warmup", "0", "--repeats", "5",
                                    "--batch-sizes", "1", "8", "--out", str(tmp_path)])  # fmt: skip
    out = " ".join(capsys.readouterr().out.split())
    for text in ("median [interquartile range]", "within float32 budget", "Targets", "--full decides", "in all"):
        assert text in out
    timing = payload["latency"]["8"][lab01_benchmark.PIPELINE]
    assert timing.repeats == 5
    assert [target.verdict.split(" ")[0] for target in payload["targets"]][-1] == "inconclusive"
    document = (tmp_path / "lab01_benchmark.json").read_text()
    assert '"samples_s"' in document and '"q3"' in document
    assert (tmp_path / "lab01_speedup.png").stat().st_size > 0


def test_lab02_benchmark_writes_timings_with_spread_and_a_verdict(tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.setenv("LABKIT_IMPL", "solution")
    assert lab02_benchmark.main(["--repeats", "5", "--threads", "1", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "benchmark.json").read_text())
    batch1 = document["latency"]["batch1"]
    assert len(batch1["eager"]["samples_s"]) == 5 and batch1["verdict"] in (MET, MISSED, INCONCLUSIVE)
    assert set(document["coverage"]) == set(STANDARD_MODELS)
    assert (tmp_path / "latency.png").stat().st_size > 0
    assert "npu / eager" in capsys.readouterr().out
