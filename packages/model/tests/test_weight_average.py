"""WeightAverage (the EMA of `train.ema_decay`) against the average written out by hand, in a
TrainStep (eager on the CPU; captured in a CUDA graph on a GPU) and through its state."""

from __future__ import annotations

import copy

import pytest
import torch

from gptstack.model import GPT, TrainStep, WeightAverage, configure_adamw
from gptstack.model.train_step import WARMUP_STEPS
from gptstack.model.weight_average import RAMP

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def hand_average(trajectory: list[list[torch.Tensor]], decay: float) -> list[torch.Tensor]:
    """The EMA of a sequence of parameter snapshots (the first is the start), in float64."""
    average = [t.double().clone() for t in trajectory[0]]
    for n, snapshot in enumerate(trajectory[1:]):
        d = min(decay, (1 + n) / (RAMP + n))
        average = [d * a + (1 - d) * s.double() for a, s in zip(average, snapshot)]
    return average


@pytest.mark.parametrize("decay", [0.5, 0.9, 0.999])
def test_update_follows_the_ramped_decay(decay):
    gen = torch.Generator().manual_seed(int(decay * 1000))
    params = [
        torch.nn.Parameter(torch.randn(shape, generator=gen)) for shape in [(7,), (3, 5), (1,)]
    ]
    average = WeightAverage(params, decay)
    trajectory = [[p.detach().clone() for p in params]]
    for _ in range(40):
        with torch.no_grad():
            for p in params:
                p.add_(torch.randn(p.shape, generator=gen))
        average.prepare()
        average.update()
        trajectory.append([p.detach().clone() for p in params])
    for got, want in zip(average.average, hand_average(trajectory, decay), strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert average.updates == 40


def test_the_ramp_forgets_the_start_quickly():
    average = WeightAverage([torch.nn.Parameter(torch.zeros(1))], 0.999)
    decays = []
    for _ in range(100):
        decays.append(average.current_decay())
        average.prepare()
    assert decays[0] == pytest.approx(1 / RAMP) and decays[-1] < 0.92
    assert all(a < b for a, b in zip(decays, decays[1:]))


def test_swapped_in_shows_the_average_and_restores_the_weights_exactly():
    torch.manual_seed(3)
    params = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5))]
    average = WeightAverage(params, 0.9)
    with torch.no_grad():
        for p in params:
            p.mul_(3.0).add_(1.0)
    own = [p.detach().clone() for p in params]
    with average.swapped_in():
        assert all(torch.equal(p, a) for p, a in zip(params, average.average))
        assert not any(torch.equal(p, o) for p, o in zip(params, own))
    assert all(torch.equal(p, o) for p, o in zip(params, own))
    with pytest.raises(RuntimeError, match="inside"):
        with average.swapped_in():
            raise RuntimeError("inside")
    assert all(torch.equal(p, o) for p, o in zip(params, own))  # restored on an error too


def test_state_round_trip_and_mismatch():
    torch.manual_seed(5)
    params = [torch.nn.Parameter(torch.randn(6)), torch.nn.Parameter(torch.randn(2, 2))]
    a = WeightAverage(params, 0.95)
    for _ in range(7):
        with torch.no_grad():
            params[0].add_(1.0)
        a.prepare()
        a.update()
    b = WeightAverage(params, 0.95)
    b.load_state_dict(a.state_dict())
    assert b.updates == 7 and all(torch.equal(x, y) for x, y in zip(a.average, b.average))
    other = WeightAverage([torch.nn.Parameter(torch.randn(6))], 0.95)
    with pytest.raises(ValueError, match="does not match"):
        other.load_state_dict(a.state_dict())


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5, 1.5])
def test_a_decay_outside_the_open_interval_is_refused(decay):
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        WeightAverage([torch.nn.Parameter(torch.zeros(1))], decay)


def test_train_step_averages_the_weights_after_each_optimizer_step(tiny_config, random_tokens):
    torch.manual_seed(9)
    cfg = tiny_config(dropout=0.0)
    model = GPT(cfg)
    opt = configure_adamw(model, 0.1, 3e-3, (0.9, 0.95), "cpu")
    average = WeightAverage(model.parameters(), 0.8)
    step = TrainStep(
        model,
        model.parameters(),
        opt,
        device=torch.device("cpu"),
        bf16=False,
        grad_clip=1.0,
        average=average,
    )
    params = [p for p in model.parameters() if p.requires_grad]
    trajectory = [[p.detach().clone() for p in params]]
    for i in range(6):
        x = random_tokens(40 + 2 * i, 2, 8, cfg.vocab_size)
        y = random_tokens(41 + 2 * i, 2, 8, cfg.vocab_size)
        step.step([(x, y)], 3e-3)
        trajectory.append([p.detach().clone() for p in params])
    for got, want in zip(average.average, hand_average(trajectory, 0.8), strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
@needs_cuda
def test_captured_step_averages_like_the_eager_step_on_cuda(tiny_config, random_tokens, rel_err):
    """The update is captured in the whole-step graph and still follows the ramp at replay."""
    device = torch.device("cuda")
    torch.manual_seed(13)
    cfg = tiny_config(dropout=0.0)
    model = GPT(cfg).to(device)
    twin = copy.deepcopy(model)
    opt = configure_adamw(model, 0.1, 1e-3, (0.9, 0.95), "cuda", capturable=True)
    twin_opt = configure_adamw(twin, 0.1, 1e-3, (0.9, 0.95), "cuda", capturable=True)
    avg, twin_avg = WeightAverage(model.parameters(), 0.9), WeightAverage(twin.parameters(), 0.9)
    common = dict(device=device, bf16=True, grad_clip=1.0)
    graphed = TrainStep(model, model.parameters(), opt, cuda_graph=True, average=avg, **common)
    eager = TrainStep(twin, twin.parameters(), twin_opt, average=twin_avg, **common)
    for i in range(WARMUP_STEPS + 6):
        x = random_tokens(70 + 2 * i, 4, 16, cfg.vocab_size).to(device)
        y = random_tokens(71 + 2 * i, 4, 16, cfg.vocab_size).to(device)
        graphed.step([(x, y)], 1e-3)
        eager.step([(x, y)], 1e-3)
    assert graphed.graph is not None
    for a, b in zip(avg.average, twin_avg.average, strict=True):
        assert rel_err(a, b) < 1e-3
    # the average differs from the weights: it really is an average, not a copy
    assert any(not torch.equal(a, p) for a, p in zip(avg.average, avg.params))
