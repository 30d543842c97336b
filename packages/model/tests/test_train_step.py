"""TrainStep, the one training step of `gptstack train` and `gptstack bench train`, against a
step written out by hand; on a GPU, the captured CUDA-graph step against the eager one."""

from __future__ import annotations

import copy

import pytest
import torch

from gptstack.model import GPT, TrainStep, configure_adamw
from gptstack.model.train_step import WARMUP_STEPS

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def batches(random_tokens, seed: int, steps: int, accum: int, B: int, T: int, V: int, device="cpu"):
    return [
        [
            (
                random_tokens(seed + 100 * s + 2 * m, B, T, V).to(device),
                random_tokens(seed + 100 * s + 2 * m + 1, B, T, V).to(device),
            )
            for m in range(accum)
        ]
        for s in range(steps)
    ]


def reference_step(model, opt, batch, lr, clip):
    """The step as nanoGPT writes it: zero, accumulate loss/accum gradients, clip, step; returns
    the mean micro-batch loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    losses = []
    for x, y in batch:
        _, loss = model(x, y)
        (loss / len(batch)).backward()
        losses.append(loss.detach())
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return sum(losses[1:], losses[0]) / len(batch)


@pytest.mark.parametrize("accum,clip", [(1, 1.0), (3, 0.05)])
def test_eager_step_equals_the_hand_written_step(accum, clip, tiny_config, random_tokens):
    torch.manual_seed(7)
    cfg = tiny_config(dropout=0.0)
    model = GPT(cfg)
    twin = copy.deepcopy(model)
    opt = configure_adamw(model, 0.1, 3e-3, (0.9, 0.95), "cpu")
    twin_opt = configure_adamw(twin, 0.1, 3e-3, (0.9, 0.95), "cpu")
    step = TrainStep(
        model, model.parameters(), opt, device=torch.device("cpu"), bf16=False, grad_clip=clip
    )
    for i, batch in enumerate(batches(random_tokens, 3, 4, accum, 2, 8, cfg.vocab_size)):
        lr = 3e-3 * (i + 1) / 4  # the schedule changes the rate every step
        loss = step.step(batch, lr)
        ref = reference_step(twin, twin_opt, batch, lr, clip)
        assert not loss.requires_grad  # the step's autograd graph is not kept alive
        assert torch.equal(loss, ref)
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("accum", [1, 4])
def test_no_sync_wraps_every_micro_batch_but_the_last(accum, tiny_config, random_tokens):
    """The data-parallel hook: no_sync() is entered around each micro-batch's forward and
    backward except the last one's (so DDP reduces gradients once, on the last backward), and
    the step computes what it computes without the hook."""
    torch.manual_seed(5)
    cfg = tiny_config(dropout=0.0)
    model = GPT(cfg)
    twin = copy.deepcopy(model)
    opt = configure_adamw(model, 0.1, 3e-3, (0.9, 0.95), "cpu")
    twin_opt = configure_adamw(twin, 0.1, 3e-3, (0.9, 0.95), "cpu")
    events = []

    class Recorder:  # stands in for DDP.no_sync: records when it is entered and left
        def __enter__(self):
            events.append("enter")

        def __exit__(self, *exc):
            events.append("exit")

    def fwd(x, y):
        events.append("forward")
        return model(x, y)

    step = TrainStep(
        fwd,
        model.parameters(),
        opt,
        device=torch.device("cpu"),
        bf16=False,
        grad_clip=1.0,
        no_sync=Recorder,
    )
    plain = TrainStep(
        twin, twin.parameters(), twin_opt, device=torch.device("cpu"), bf16=False, grad_clip=1.0
    )
    for batch in batches(random_tokens, 9, 2, accum, 2, 8, cfg.vocab_size):
        events.clear()
        assert torch.equal(step.step(batch, 1e-3), plain.step(batch, 1e-3))
        assert events == ["enter", "forward", "exit"] * (accum - 1) + ["forward"]
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)


def test_cuda_graph_needs_a_gpu(tiny_config):
    model = GPT(tiny_config())
    opt = configure_adamw(model, 0.1, 1e-3, (0.9, 0.95), "cpu")
    with pytest.raises(ValueError, match="CUDA device"):
        TrainStep(
            model,
            model.parameters(),
            opt,
            device=torch.device("cpu"),
            bf16=False,
            grad_clip=1.0,
            cuda_graph=True,
        )


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("accum", [1, 2])
def test_captured_step_matches_eager_on_cuda(accum, tiny_config, random_tokens, rel_err):
    """The whole step replayed as a CUDA graph computes what the eager step computes: same
    losses and weights after warm-up, capture and several replays with a changing rate."""
    device = torch.device("cuda")
    torch.manual_seed(11)
    cfg = tiny_config(dropout=0.0)
    model = GPT(cfg).to(device)
    twin = copy.deepcopy(model)
    opt = configure_adamw(model, 0.1, 1e-3, (0.9, 0.95), "cuda", capturable=True)
    twin_opt = configure_adamw(twin, 0.1, 1e-3, (0.9, 0.95), "cuda", capturable=True)
    graphed = TrainStep(
        model, model.parameters(), opt, device=device, bf16=True, grad_clip=1.0, cuda_graph=True
    )
    eager = TrainStep(twin, twin.parameters(), twin_opt, device=device, bf16=True, grad_clip=1.0)
    steps = WARMUP_STEPS + 5
    for i, batch in enumerate(
        batches(random_tokens, 5, steps, accum, 4, 16, cfg.vocab_size, device)
    ):
        lr = 1e-3 * (1 + i) / steps
        a, b = graphed.step(batch, lr), eager.step(batch, lr)
        assert rel_err(a.float(), b.float()) < 1e-5, i
    assert graphed.graph is not None
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert rel_err(p, q) < 1e-3
