"""Training with model.fp8: the same run in FP8 matmuls learns as the run without, and its
evaluations are the model's own (no FP8)."""

import pytest

from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.errors import ConfigError


@pytest.mark.slow
def test_smoke_training_in_fp8_follows_the_run_without(train_smoke):
    runs = {}
    for fp8 in ("none", "all"):
        records, model = train_smoke(
            fp8, "tokenizer.pad_vocab_to=16", "train.max_steps=20", "train.log_interval=1",
            "train.eval_interval=10", "train.dtype=fp32", f"model.fp8={fp8}",
        )  # fmt: skip
        runs[fp8] = (records["train"], records["eval"])
        assert model["fp8"] == fp8  # the checkpoint says how it trained
    (train_ref, eval_ref), (train_fp8, eval_fp8) = runs["none"], runs["all"]
    # step 0's evaluation sees the same initial weights in eval mode: no FP8, the same bits
    assert eval_fp8[0]["val_loss"] == eval_ref[0]["val_loss"]
    assert sorted(train_fp8) == sorted(train_ref) == list(range(1, 21))
    first = train_ref[1]["loss"]
    assert train_fp8[1]["loss"] != first  # the forward did run in FP8
    assert train_fp8[1]["loss"] == pytest.approx(first, rel=0.02)
    for step in (10, 20):  # learning as much: within 3 % of the loss without
        assert train_fp8[step]["loss"] < first - 0.3
        assert eval_fp8[step]["val_loss"] == pytest.approx(eval_ref[step]["val_loss"], rel=0.03)


def test_fp8_override_is_checked():
    with pytest.raises(ConfigError, match="model.fp8 is 'e4m3'"):
        apply_overrides(load_preset("smoke"), ["model.fp8=e4m3"])
