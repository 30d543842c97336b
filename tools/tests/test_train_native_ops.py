"""Training with model.ops=gptstack (gptstack.cuda_ops kernels) gives the losses of ops=torch."""

import pytest

from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.errors import ConfigError

pytest.importorskip("gptstack.cuda_ops")


@pytest.mark.slow
def test_smoke_training_losses_match_torch_ops(train_smoke):
    runs = {}
    for ops in ("torch", "gptstack"):
        records, model = train_smoke(
            ops, "train.max_steps=12", "train.log_interval=1", "train.eval_interval=12",
            f"model.ops={ops}",
        )  # fmt: skip
        runs[ops] = {step: r["loss"] for step, r in records["train"].items()}
        assert model["ops"] == ops  # the checkpoint says which ops trained it
    assert sorted(runs["torch"]) == sorted(runs["gptstack"]) == list(range(1, 13))
    for step, loss in runs["torch"].items():
        # float32 on the CPU: the two paths round differently, 12 AdamW steps keep it ~1e-6
        assert runs["gptstack"][step] == pytest.approx(loss, rel=1e-4), step


def test_ops_override_is_checked():
    with pytest.raises(ConfigError, match="torch, gptstack|'torch', 'gptstack'"):
        apply_overrides(load_preset("smoke"), ["model.ops=cudnn"])
