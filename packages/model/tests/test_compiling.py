import sys
import threading
import types

import pytest
import torch

from gptstack.model import GPT, GPTConfig, ModelError
from gptstack.model.compiling import compile_model, release_compile_workers


def test_regional_compile_gives_the_eager_losses():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=40))
    x = torch.randint(0, 40, (3, 16))
    want = model(x, x)[1]
    fwd = compile_model(model, "regional", backend="eager")
    assert torch.allclose(fwd(x, x)[1], want)
    with pytest.raises(ModelError, match="unknown"):
        compile_model(model, "everything")


def test_compile_workers_shut_down_on_a_joined_thread(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(
        shutdown_compile_workers=lambda: calls.append(threading.current_thread())
    )
    monkeypatch.setitem(sys.modules, "torch._inductor.async_compile", fake)
    thread = release_compile_workers()
    thread.join(timeout=10)
    assert calls == [thread] and thread is not threading.main_thread()
    assert not thread.daemon  # joined before Inductor's own exit handler runs


def test_no_thread_where_inductor_never_started(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch._inductor.async_compile", raising=False)
    assert release_compile_workers() is None
