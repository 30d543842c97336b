import pytest
import torch

from gptstack.model import GPT, GPTConfig, ModelError
from gptstack.model.compiling import compile_model


def test_regional_compile_gives_the_eager_losses():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=40))
    x = torch.randint(0, 40, (3, 16))
    want = model(x, x)[1]
    fwd = compile_model(model, "regional", backend="eager")
    assert torch.allclose(fwd(x, x)[1], want)
    with pytest.raises(ModelError, match="unknown"):
        compile_model(model, "everything")
