"""safetensors save/load: round trip, the name contract in the file, validation errors."""

import pytest
import torch
from safetensors import safe_open

from gptstack.model import ModelError, load_safetensors, save_safetensors, unwrap


def file_tensors(path):
    with safe_open(str(path), framework="pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def test_round_trip_gives_identical_logits(tmp_path, make_gpt, random_tokens):
    source = make_gpt(20)
    target = make_gpt(21)
    idx = random_tokens(20, 2, 12, source.config.vocab_size)
    expected, _ = source(idx)
    assert not torch.equal(target(idx)[0], expected)
    path = save_safetensors(source, tmp_path / "model.safetensors")
    assert load_safetensors(target, path) is target
    assert torch.equal(target(idx)[0], expected)
    assert target.lm_head.weight is target.wte.weight  # the tie survives loading
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]  # no temp left


def test_file_holds_float32_contract_names_without_the_tied_head(tmp_path, make_gpt):
    model = make_gpt(22).to(torch.bfloat16)
    path = save_safetensors(model, tmp_path / "m.safetensors")
    tensors = file_tensors(path)
    expected = [n for n in model.state_dict() if n != "lm_head.weight"]
    assert sorted(tensors) == sorted(expected)
    assert all(t.dtype == torch.float32 for t in tensors.values())
    assert torch.equal(tensors["wte.weight"], model.wte.weight.float())


def test_wrapped_models_are_unwrapped(tmp_path, make_gpt):
    """A stand-in for torch.compile's OptimizedModule (which keeps the model as `_orig_mod`);
    the real wrapper is exercised by the slow test below."""

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self._orig_mod = inner

    model = make_gpt(23)
    assert unwrap(Wrapper(Wrapper(model))) is model
    path = save_safetensors(Wrapper(model), tmp_path / "w.safetensors")
    assert not any(name.startswith("_orig_mod") for name in file_tensors(path))
    fresh = make_gpt(24)
    load_safetensors(Wrapper(fresh), path)
    assert torch.equal(fresh.wpe.weight, model.wpe.weight)


@pytest.mark.slow  # importing torch.compile's machinery takes several seconds on 2 cores
def test_torch_compile_wrapper_is_unwrapped(tmp_path, make_gpt):
    model = make_gpt(23)
    compiled = torch.compile(model)  # lazy: nothing is compiled until it is called
    assert unwrap(compiled) is model
    path = save_safetensors(compiled, tmp_path / "c.safetensors")
    assert not any(name.startswith("_orig_mod") for name in file_tensors(path))


def test_wrong_shape_is_rejected_with_the_tensor_named(tmp_path, make_gpt):
    path = save_safetensors(make_gpt(25, block_size=16), tmp_path / "a.safetensors")
    other = make_gpt(26, block_size=24)
    before = other.wpe.weight.clone()
    with pytest.raises(ModelError, match=r"wpe\.weight file \[16, 32\] vs model \[24, 32\]"):
        load_safetensors(other, path)
    assert torch.equal(other.wpe.weight, before)  # nothing was copied


def test_missing_and_unexpected_tensors_are_listed(tmp_path, make_gpt):
    path = save_safetensors(make_gpt(27, bias=False), tmp_path / "nobias.safetensors")
    with pytest.raises(ModelError, match=r"missing \['h\.0\.attn\.c_attn\.bias'"):
        load_safetensors(make_gpt(28, bias=True), path)
    path = save_safetensors(make_gpt(29, n_layer=3), tmp_path / "deep.safetensors")
    with pytest.raises(ModelError, match=r"unexpected \['h\.2\.attn\.c_attn\.bias'"):
        load_safetensors(make_gpt(30, n_layer=2), path)


def test_missing_or_corrupt_file(tmp_path, make_gpt):
    model = make_gpt(31)
    with pytest.raises(ModelError, match="not found"):
        load_safetensors(model, tmp_path / "absent.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(ModelError, match="not a readable safetensors file"):
        load_safetensors(model, bad)
