"""Lab 1's benchmark script gives verdicts the noise cannot flip (timings injected, nothing timed)."""

import pytest

from lab01_fx_passes.given import benchmark as lab01_benchmark
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


def test_lab01_the_lowering_is_judged_against_inductor_at_every_timed_batch_size():
    """With Inductor timed, one more target per batch size: a clear loss is missed, parity is inconclusive."""
    b = lab01_benchmark
    faster = timing_ms(200, 201, 199, 202, 200, 198, 203)
    slower = timing_ms(300, 301, 299, 302, 300, 298, 303)
    timings = lab01_batch(faster, faster, faster)
    timings[b.TARGET_BATCH] |= {b.ONEDNN: slower, b.INDUCTOR: faster}
    timings[1] = {b.BASELINE: faster, b.ONEDNN: faster, b.INDUCTOR: timing_ms(199, 202, 200, 201, 198, 203, 200)}
    targets = {target.name: target.verdict for target in b.check_targets(timings, {})}
    assert targets[f"{b.ONEDNN} at least as fast as {b.INDUCTOR} (batch 1)"] == INCONCLUSIVE
    assert targets[f"{b.ONEDNN} at least as fast as {b.INDUCTOR} (batch 8)"] == MISSED


def test_lab01_the_lowering_is_packed_for_every_timed_batch_size(monkeypatch):
    """oneDNN packs a weight for the input size it is shown, so the extension's candidate is lowered
    once per timed batch size on that many images (as Inductor compiles per size), and a size
    nobody packed for still gets the original's answer."""
    import torch

    from lab01_fx_passes.given.models import TinyResNet, randomize_batch_norm
    from labkit.impl import load_lab

    monkeypatch.setenv("LABKIT_IMPL", "solution")
    lab = load_lab(lab01_benchmark.PACKAGE)
    shown = []

    class RecordingLab:
        def onednn_pipeline(self, example_inputs):
            shown.append(tuple(example_inputs[0].shape))
            return lab.onednn_pipeline(example_inputs)

    model = randomize_batch_norm(TinyResNet(), 0).eval()
    candidate = lab01_benchmark.build_onednn_candidate(RecordingLab(), model, [1, 8])
    assert [size[0] for size in shown] == [1, 8], "one lowering per timed batch size, shown that many images"
    assert sorted(candidate.graphs) == [1, 8]
    with torch.no_grad():
        for batch in (1, 8, 3):
            x = torch.randn(batch, *shown[0][1:], generator=torch.Generator().manual_seed(batch))
            torch.testing.assert_close(candidate(x), model(x), rtol=1e-4, atol=1e-4)


def test_lab01_the_inductor_anchor_is_really_frozen(monkeypatch):
    """Frozen weights are constants of the compiled code: a weight changed in place after the compile
    is not seen (no guard watches it; the lab's step 8 is about exactly that). Compiled with
    ``options={"freezing": True}`` the weights stayed graph inputs, so the change was seen: the
    benchmark's strongest anchor had run as a plain Inductor compile."""
    import torch
    from torch import nn

    monkeypatch.setattr(lab01_benchmark.copy, "deepcopy", lambda model: model)  # compile the model we hold
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval()
    candidate = lab01_benchmark.build_inductor_candidate(model, [2], image_shape=(3, 12, 12))
    x = torch.randn(2, 3, 12, 12)
    before = candidate(x)
    with torch.no_grad():
        model[0].weight.mul_(-1)
        eager_after = model(x)
    assert not torch.allclose(eager_after, before), "the in-place change must change eager's answer"
    torch.testing.assert_close(candidate(x), before, msg="the compiled anchor saw a weight change: not frozen")


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


# -- The script end to end, on the reference, in its smallest form (wiring, not speed) -----------
def test_lab01_benchmark_writes_timings_with_spread_targets_and_a_chart(tmp_path, monkeypatch, capsys):
    """The whole script on a small ResNet (ResNet-50 takes minutes): every table, the JSON and the PNG."""
    from lab01_fx_passes.given.models import TinyResNet, randomize_batch_norm

    monkeypatch.setenv("LABKIT_IMPL", "solution")
    monkeypatch.setattr(lab01_benchmark, "build_resnet50", lambda weights: randomize_batch_norm(TinyResNet(), 0).eval())
    payload = lab01_benchmark.main(["--images", "8", "--accuracy-batch", "4", "--warmup", "0", "--repeats", "5",
                                    "--batch-sizes", "1", "8", "--no-inductor", "--out", str(tmp_path)])  # fmt: skip
    out = " ".join(capsys.readouterr().out.split())
    for text in ("median [interquartile range]", "within float32 budget", "Targets", "--full decides", "in all"):
        assert text in out
    timing = payload["latency"]["8"][lab01_benchmark.PIPELINE]
    assert timing.repeats == 5
    assert [target.verdict.split(" ")[0] for target in payload["targets"]][-1] == "inconclusive"
    document = (tmp_path / "lab01_benchmark.json").read_text()
    assert '"samples_s"' in document and '"q3"' in document
    assert (tmp_path / "lab01_speedup.png").stat().st_size > 0
