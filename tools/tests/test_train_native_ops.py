"""Training with model.ops=gptstack (gptstack.cuda_ops kernels) gives the losses of ops=torch."""

import json

import pytest

from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.errors import ConfigError
from gptstack.tools.train import train

pytest.importorskip("gptstack.cuda_ops")


def _losses(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in lines if r["event"] == "train"}


@pytest.mark.slow
def test_smoke_training_losses_match_torch_ops(tmp_path, small_corpus):
    runs = {}
    for ops in ("torch", "gptstack"):
        cfg = apply_overrides(
            load_preset("smoke"),
            [
                f"data.path={small_corpus}",
                "train.max_steps=12",
                "train.log_interval=1",
                "train.eval_interval=12",
                "train.device=cpu",
                f"model.ops={ops}",
            ],
        )
        train(cfg, tmp_path / ops, progress=False, log=lambda s: None)
        runs[ops] = _losses(tmp_path / ops)
        meta = json.loads((tmp_path / ops / "last" / "config.json").read_text())
        assert meta["model"]["ops"] == ops  # the checkpoint says which ops trained it
    assert sorted(runs["torch"]) == sorted(runs["gptstack"]) == list(range(1, 13))
    for step, loss in runs["torch"].items():
        # float32 on the CPU: the two paths round differently, 12 AdamW steps keep it ~1e-6
        assert runs["gptstack"][step] == pytest.approx(loss, rel=1e-4), step


def test_ops_override_is_checked():
    with pytest.raises(ConfigError, match="torch, gptstack|'torch', 'gptstack'"):
        apply_overrides(load_preset("smoke"), ["model.ops=cudnn"])
