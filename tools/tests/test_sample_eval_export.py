"""sample, eval, export and the pipeline on a small trained checkpoint (CPU)."""

import io
import json

import pytest
import torch

from gptstack.model import fused_step
from gptstack.quant import read_artifact
from gptstack.tokenizer import UnknownCharacterError
from gptstack.tools import runtime
from gptstack.tools.checkpoint import load_checkpoint
from gptstack.tools.cli import main
from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.export import export_checkpoint, tokenizer_tables
from gptstack.tools.sample import sample
from gptstack.tools.train import train


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, shakespeare_text):
    root = tmp_path_factory.mktemp("trained")
    data = root / "data.txt"
    data.write_text(shakespeare_text[:50_000])
    cfg = apply_overrides(load_preset("smoke"), [f"data.path={data}", "train.max_steps=40"])
    train(cfg, root / "run", progress=False, log=lambda s: None)
    return root / "run"


def test_sample_streams_the_prompt_and_new_text(run_dir):
    ckpt = load_checkpoint(run_dir)
    out = io.StringIO()
    result = sample(ckpt, "ROMEO:", tokens=30, temperature=0.8, top_k=10, seed=3, out=out)
    assert result.new_tokens == 30 and result.text.startswith("ROMEO:")
    assert out.getvalue().rstrip("\n") == result.text
    again = sample(ckpt, "ROMEO:", tokens=30, temperature=0.8, top_k=10, seed=3, out=None)
    assert again.text == result.text  # same seed, same text
    with pytest.raises(UnknownCharacterError, match="'\\\\x00'|position"):
        sample(ckpt, "ROMEO\x00", tokens=3, out=None)


def test_cpu_sampling_threads_follow_the_slide_window(run_dir, tmp_path):
    """On a CPU sample() takes the threads of each phase (threads.DecodeThreads): the choice for
    whole windows once the context (32 here) is full under slide, never under halve; the
    sample-run record and the status line say so."""
    ckpt = load_checkpoint(run_dir)
    short = sample(ckpt, "ROMEO:", tokens=20, seed=1, out=None)  # 6 + 20 < 32: cached steps only
    assert short.threads.filling is not None and short.threads.full is None
    slide = sample(ckpt, "ROMEO:", tokens=40, seed=1, out=None)
    assert slide.threads.full is not None and slide.threads.threads == slide.threads.full.threads
    halve = sample(ckpt, "ROMEO:", tokens=40, seed=1, window="halve", out=None)
    assert halve.threads.full is None
    record = tmp_path / "sample.json"
    assert main(["sample", "--ckpt", str(run_dir), "--tokens", "40", "--seed", "1",
                 "--json", str(record)]) == 0  # fmt: skip
    fields = json.loads(record.read_text())
    assert fields["threads"] == slide.threads.threads
    assert fields["threads_detail"] == slide.threads.describe()


@pytest.mark.parametrize("native_bf16", [True, False])
def test_cpu_sampling_dtype_follows_native_bf16(run_dir, monkeypatch, native_bf16):
    """--dtype auto on a CPU: bf16 weights where the CPU computes bf16 natively (training's
    rule), fp32 where bf16 would be emulated; an explicit --dtype wins either way. The weights
    really are converted, and the same seed gives the same text."""
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: native_bf16)
    ckpt = load_checkpoint(run_dir)
    auto = sample(ckpt, "ROMEO:", tokens=20, seed=2, out=None)
    assert auto.dtype == ("bf16" if native_bf16 else "fp32")
    assert next(ckpt.model.parameters()).dtype == (torch.bfloat16 if native_bf16 else torch.float32)
    assert sample(ckpt, "ROMEO:", tokens=20, seed=2, out=None).text == auto.text
    for explicit in ("fp32", "bf16"):
        assert sample(ckpt, "ROMEO:", tokens=5, seed=2, dtype=explicit, out=None).dtype == explicit


def test_graph_decoder_with_fused_kernels_writes_the_same_greedy_text(
    run_dir, tmp_path, capsys, monkeypatch
):
    ckpt = load_checkpoint(run_dir)
    greedy = {"tokens": 40, "temperature": 0, "dtype": "fp32", "out": None}
    naive = sample(ckpt, "ROMEO:", mode="naive", **greedy)
    fused = sample(ckpt, "ROMEO:", mode="graph", kernels="gptstack", **greedy)
    torch_step = sample(ckpt, "ROMEO:", mode="graph", kernels="torch", **greedy)
    assert (fused.kernels, torch_step.kernels) == ("gptstack", "torch")
    assert (fused.sampler, torch_step.sampler) == ("torch", "torch")  # greedy is an argmax
    assert fused.text == naive.text == torch_step.text
    # asked for decode_blocks on a CPU, the step runs op by op, and the result says so
    monkeypatch.setattr(fused_step, "ONE_LAUNCH", True)
    asked = sample(ckpt, "ROMEO:", mode="graph", kernels="gptstack", **greedy)
    assert not asked.one_launch and asked.text == fused.text
    monkeypatch.undo()
    record = tmp_path / "sample.json"
    args = ["sample", "--ckpt", str(run_dir), "--tokens", "5", "--mode", "graph", "--kernels",
            "gptstack", "--seed", "1", "--json", str(record)]  # fmt: skip
    assert main(args) == 0
    fields = json.loads(record.read_text())
    assert (fields["kernels"], fields["sampler"]) == ("gptstack", "gptstack")
    assert "fused gptstack kernels and sampler" in capsys.readouterr().err
    # the fused sampler's text is seeded too, and top-p falls back to PyTorch's sampling
    drawn = [sample(ckpt, "ROMEO:", tokens=30, mode="graph", kernels="gptstack", seed=4, out=None)
             for _ in range(2)]  # fmt: skip
    assert drawn[0].sampler == "gptstack" and drawn[0].text == drawn[1].text
    top_p = sample(ckpt, "ROMEO:", tokens=5, mode="graph", kernels="gptstack", top_p=0.9, out=None)
    assert top_p.sampler == "torch"


def test_prompt_with_an_unknown_character_is_one_line_error(run_dir, capsys):
    assert (
        main(["sample", "--ckpt", str(run_dir), "--prompt", "hello \u263a", "--tokens", "3"]) == 2
    )
    err = capsys.readouterr().err
    assert "\u263a" in err and "Traceback" not in err


def test_eval_reports_consistent_numbers(run_dir, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert (
        main(
            [
                "eval",
                "--ckpt",
                str(run_dir),
                "--samples",
                "2",
                "--sample-tokens",
                "60",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())["float"]
    assert r["perplexity"] == pytest.approx(2.718281828 ** r["val_loss"], rel=1e-9)
    # char tokenizer: one token per character, so bits/char = loss / ln 2
    assert r["val_bits_per_char"] == pytest.approx(r["val_loss"] / 0.6931471805599453)
    g = r["generated"]
    assert (
        0 <= g["real_word_fraction"] <= 1
        and 0 <= g["copied_8gram_fraction"] <= 1
        and g["words"] > 0
    )
    assert "val bits/char" in capsys.readouterr().out


def test_export_writes_an_artifact_the_reader_accepts(run_dir, tmp_path):
    ckpt = load_checkpoint(run_dir)
    res = export_checkpoint(run_dir, tmp_path / "m.gsm", target="esp32s3")
    art = read_artifact(res.path)
    assert art.spec.n_layer == ckpt.model.config.n_layer
    assert art.tables.token_bytes == tokenizer_tables(ckpt.tokenizer).token_bytes
    assert res.plan.fits and "arena" in res.plan_text


def test_export_refuses_a_model_that_does_not_fit(run_dir, tmp_path, capsys):
    # Same weights, but claim a huge context: the KV cache no longer fits the S3's SRAM.
    meta = json.loads((run_dir / "best" / "config.json").read_text())
    big = tmp_path / "big"
    big.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (big / name).write_bytes((run_dir / "best" / name).read_bytes())
    import numpy as np
    from safetensors.numpy import load_file, save_file

    w = load_file(str(big / "model.safetensors"))
    T, C = 4096, w["wpe.weight"].shape[1]
    w["wpe.weight"] = np.zeros((T, C), np.float32)
    save_file(w, str(big / "model.safetensors"))
    meta["model"]["block_size"] = T
    (big / "config.json").write_text(json.dumps(meta))
    assert (
        main(["export", "--ckpt", str(big), "--target", "esp32s3", "-o", str(tmp_path / "x.gsm")])
        == 2
    )
    err = capsys.readouterr().err
    assert "does not fit" in err and "block_size" in err and "more than" in err
    assert not (tmp_path / "x.gsm").exists()
    assert (
        main(["export", "--ckpt", str(big), "--target", "host", "-o", str(tmp_path / "x.gsm")]) == 0
    )
