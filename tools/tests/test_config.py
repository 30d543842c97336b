import dataclasses
import tomllib

import pytest

from gptstack.tools.config import (
    RunConfig,
    apply_overrides,
    load_config_file,
    load_preset,
    preset_names,
)
from gptstack.tools.errors import ConfigError


def test_every_preset_loads_and_names_itself():
    names = preset_names()
    assert {"esp32", "shakespeare-char", "gpt2-124m", "smoke"} <= set(names)
    for name in names:
        assert load_preset(name).name == name


def test_preset_values_are_the_documented_models():
    esp = load_preset("esp32")
    assert (esp.model.n_layer, esp.model.n_embd, esp.model.n_head, esp.model.block_size) == (
        6,
        256,
        8,
        64,
    )
    assert (esp.tokenizer.kind, esp.tokenizer.vocab_size, esp.train.max_steps) == (
        "bpe",
        512,
        3000,
    )
    # the sweep's recipe anneals into its best step: the last step must be an evaluation
    assert esp.train.max_steps % esp.train.eval_interval == 0
    ch = load_preset("shakespeare-char")
    assert (ch.model.n_layer, ch.model.n_head, ch.model.n_embd, ch.model.block_size) == (
        6,
        6,
        384,
        256,
    )
    assert (ch.train.batch_size, ch.train.max_steps, ch.model.dropout) == (64, 4500, 0.35)
    assert ch.train.ema_decay == 0.999
    g = load_preset("gpt2-124m")
    tokens_per_step = g.train.batch_size * g.train.grad_accum * g.model.block_size
    assert 0.45e6 < tokens_per_step < 0.55e6


def test_set_parses_by_field_type():
    cfg = apply_overrides(
        load_preset("smoke"),
        [
            "train.lr=3e-4",
            "train.max_steps=7",
            "model.bias=false",
            "model.attention=manual",
            "train.eval_interval=1e1",
            "model.ops=gptstack:loss",
            "train.cpu_bf16_ops=gptstack:layernorm,gelu",
        ],
    )
    assert cfg.model.ops == "gptstack:loss" and cfg.train.cpu_bf16_ops == "gptstack:layernorm,gelu"
    assert cfg.train.lr == 3e-4 and cfg.train.max_steps == 7 and cfg.model.bias is False
    assert cfg.model.attention == "manual" and cfg.train.eval_interval == 10


@pytest.mark.parametrize(
    "item, words",
    [
        ("train.nope=1", ["unknown key train.nope", "max_steps"]),
        ("nope.lr=1", ["unknown section", "train"]),
        ("train.lr", ["section.key=value"]),
        ("train.max_steps=many", ["not a valid int"]),
        ("model.attention=flash", ["choose one of", "sdpa"]),
        ("model.ops=gptstack:softmax", ["model.ops is 'gptstack:softmax'", "'loss'"]),
        ("train.cpu_bf16_ops=native", ["train.cpu_bf16_ops is 'native'", "'' for model.ops"]),
        ("train.cuda_ops=gptstack:fp8", ["train.cuda_ops is 'gptstack:fp8'", "'' for model.ops"]),
        ("model.fp8=e4m3", ["model.fp8 is 'e4m3'", "'head'"]),
        ("model.n_head=5", ["divisible"]),
        ("model.block_size=1", ["block_size"]),
    ],
)
def test_bad_overrides_name_the_problem(item, words):
    with pytest.raises(ConfigError) as e:
        apply_overrides(load_preset("smoke"), [item])
    for w in words:
        assert w in str(e.value)


def test_config_file_round_trip(tmp_path):
    cfg = load_preset("esp32")
    lines = []
    for section in ("model", "tokenizer", "data", "train"):
        lines.append(f"[{section}]")
        for k, v in cfg.to_dict()[section].items():
            lines.append(
                f"{k} = {v!r}".replace("True", "true").replace("False", "false").replace("'", '"')
            )
    path = tmp_path / "c.toml"
    path.write_text("\n".join(lines))
    tomllib.loads(path.read_text())
    assert load_config_file(path).to_dict()["train"] == cfg.to_dict()["train"]
    assert RunConfig.from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config_file(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nn_layer = ")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config_file(bad)
    with pytest.raises(ConfigError, match="unknown preset"):
        load_preset("gpt5")


def test_model_section_is_gptconfig_and_follows_the_backend_registry():
    import dataclasses

    from gptstack.model import GPTConfig, register_attention_backend, sdpa_attention
    from gptstack.tools.config import ModelSection

    gpt_fields = {f.name for f in dataclasses.fields(GPTConfig)} - {"vocab_size"}
    assert {f.name for f in dataclasses.fields(ModelSection)} == gpt_fields
    cfg = load_preset("smoke")
    with pytest.raises(ConfigError, match="model.attention.*'manual'.*'sdpa'"):
        apply_overrides(cfg, ["model.attention=config_test_backend"])
    register_attention_backend("config_test_backend", sdpa_attention, replace=True)
    cfg = apply_overrides(load_preset("smoke"), ["model.attention=config_test_backend"])
    assert cfg.model.attention == "config_test_backend"
    with pytest.raises(ConfigError, match="model.n_embd is 30, not divisible by n_head=4"):
        apply_overrides(load_preset("smoke"), ["model.n_head=4", "model.n_embd=30"])


def test_auto_compile_is_off_on_cpu_and_full_only_for_long_cuda_runs():
    from gptstack.tools.runtime import FULL_COMPILE_MIN_STEPS, auto_compile, resolve_runtime

    assert auto_compile(False, 10**6) is None
    assert auto_compile(True, FULL_COMPILE_MIN_STEPS - 1) == "regional"
    assert auto_compile(True, FULL_COMPILE_MIN_STEPS) == "full"
    # the esp32 preset's 50,000 steps run eager on a CPU (compiling costs minutes there, gains 0)
    esp32 = load_preset("esp32").train
    assert esp32.compile == "auto"
    cpu = resolve_runtime(dataclasses.replace(esp32, device="cpu"))
    assert cpu.compile is None
    asked = dataclasses.replace(esp32, device="cpu", compile="full")
    assert resolve_runtime(asked).compile == "full"


def test_cpu_dropout_is_validated():
    with pytest.raises(ConfigError, match="train.cpu_dropout must be in"):
        apply_overrides(load_preset("smoke"), ["train.cpu_dropout=1.5"])
    assert apply_overrides(load_preset("smoke"), ["train.cpu_dropout=0.1"]).train.cpu_dropout == 0.1
