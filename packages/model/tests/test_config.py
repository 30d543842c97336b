"""GPTConfig validation and (de)serialisation."""

import pytest

from gptstack.model import GPTConfig, ModelConfigError, ModelError, register_attention_backend
from gptstack.model import attention as attention_module

GOOD = dict(vocab_size=65, block_size=32, n_layer=2, n_head=4, n_embd=64)


def test_round_trip_through_dict():
    cfg = GPTConfig(**GOOD, dropout=0.1, bias=False, attention="manual")
    d = cfg.to_dict()
    assert d == {
        **GOOD,
        "dropout": 0.1,
        "bias": False,
        "attention": "manual",
        "ops": "torch",
        "fp8": "none",
        "residual": "fp32",
    }
    assert GPTConfig.from_dict(d) == cfg
    assert cfg.head_size == 16


@pytest.mark.parametrize(
    "field, value",
    [
        ("vocab_size", 0),
        ("block_size", -4),
        ("n_layer", 1.5),
        ("n_head", True),
        ("n_embd", "64"),
        ("dropout", 1.0),
        ("dropout", -0.1),
        ("bias", "yes"),
        ("attention", "flash"),
        ("residual", "float16"),
    ],
)
def test_bad_field_names_field_and_value(field, value):
    with pytest.raises(ModelConfigError) as excinfo:
        GPTConfig(**{**GOOD, field: value})
    message = str(excinfo.value)
    assert f"GPTConfig.{field}" in message and repr(value) in message


def test_n_embd_must_divide_by_n_head():
    with pytest.raises(ModelConfigError, match=r"n_embd is 60.*n_head=8"):
        GPTConfig(**{**GOOD, "n_embd": 60, "n_head": 8})


def test_config_error_is_a_model_error():
    assert issubclass(ModelConfigError, ModelError)


def test_from_dict_rejects_unknown_and_missing_keys():
    with pytest.raises(ModelConfigError, match=r"unknown key\(s\) \['n_heads'\]"):
        GPTConfig.from_dict({**GOOD, "n_heads": 4})
    partial = dict(GOOD)
    del partial["n_layer"]
    with pytest.raises(ModelConfigError, match=r"missing required key\(s\) \['n_layer'\]"):
        GPTConfig.from_dict(partial)
    with pytest.raises(ModelConfigError, match="must be a dict"):
        GPTConfig.from_dict([("vocab_size", 3)])


def test_registered_backend_becomes_a_valid_choice(monkeypatch):
    monkeypatch.setattr(attention_module, "_BACKENDS", dict(attention_module._BACKENDS))
    with pytest.raises(ModelConfigError):
        GPTConfig(**GOOD, attention="custom")
    register_attention_backend("custom", attention_module.manual_attention)
    assert GPTConfig(**GOOD, attention="custom").attention == "custom"


def test_config_and_errors_import_without_torch():
    """The CLI reads configs and reports model errors without paying for a torch import."""
    import subprocess
    import sys

    code = (
        "import sys; from gptstack.model import GPTConfig, ModelError; "
        "from gptstack.model.config import GPTConfig as C; assert GPTConfig is C; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cuda_kernels_unavailable_names_why_for_training_and_decoding(monkeypatch, make_gpt):
    """One answer for gptstack train's train.cuda_ops and the fused decode step: built
    without CUDA, a GPU older than the kernels' sm_80, or None where they run."""
    cuda_ops = pytest.importorskip("gptstack.cuda_ops")
    import torch

    from gptstack.model.config import cuda_kernels_unavailable
    from gptstack.model.fused_step import unsupported_reason

    info = dict(cuda_ops.build_info())
    model, gpu = make_gpt(0), torch.device("cuda")
    monkeypatch.setattr(cuda_ops, "build_info", lambda: {**info, "cuda": False})
    assert "without CUDA kernels" in cuda_kernels_unavailable()
    assert "without CUDA kernels" in unsupported_reason(model, gpu)
    monkeypatch.setattr(cuda_ops, "build_info", lambda: {**info, "cuda": True})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    older = "compute capability 8.0 or newer, this GPU is 7.5"
    assert older in cuda_kernels_unavailable() and older in unsupported_reason(model, gpu)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert cuda_kernels_unavailable() is None
