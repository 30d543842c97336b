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


def test_a_compiled_heads_backward_gets_no_gradient_for_the_logits():
    """With targets, only the loss is differentiated: the compiled head's backward must take one
    incoming gradient (the loss's), not also a zero tensor of the logits' (B, T, V) shape that
    autograd would make and add each step. The same loss and gradients as eager."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    tangents = []

    def backward_compiler(gm, _inputs):
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        tangents.append([n for n in names if n.startswith("tangents")])
        return make_boxed_func(gm.forward)

    def forward_compiler(gm, _inputs):
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)
    torch.manual_seed(1)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=40))
    ref = GPT(model.config)
    ref.load_state_dict(model.state_dict())
    x, y = torch.randint(0, 40, (2, 16)), torch.randint(0, 40, (2, 16))
    torch._dynamo.reset()
    fwd = compile_model(model, "regional", backend=backend)
    logits, loss = fwd(x, y)
    loss.backward()
    want_logits, want_loss = ref(x, y)
    want_loss.backward()
    assert len(tangents) == 2  # the block's backward, then the head's
    assert tangents[-1] == ["tangents_1"]  # the head's: the loss's gradient alone
    assert torch.allclose(loss, want_loss) and torch.allclose(logits, want_logits)
    assert not logits.requires_grad
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, atol=1e-6), p.shape
    assert ref(x)[0].requires_grad  # without targets the logits keep their gradient
