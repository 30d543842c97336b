import math

import pytest
import torch
import torch.nn.functional as F

from gptstack.model import GPT, Distillation, GPTConfig, ModelConfigError, distillation_loss


def _logits(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * 3


def _reference(s, t, y, weight, temperature):
    """The objective written out position by position, in float64."""
    total_hard, total_soft, kept = 0.0, 0.0, 0
    V = s.size(-1)
    for si, ti, yi in zip(s.reshape(-1, V), t.reshape(-1, V), y.reshape(-1), strict=True):
        if yi == -1:
            continue
        kept += 1
        total_hard += -torch.log_softmax(si, -1)[yi].item()
        p = torch.softmax(ti / temperature, -1)
        total_soft += -(p * torch.log_softmax(si / temperature, -1)).sum().item()
    return (1 - weight) * total_hard / kept + weight * temperature**2 * total_soft / kept


@pytest.mark.parametrize("seed", range(4))
def test_distillation_loss_matches_the_objective_written_out(seed):
    g = torch.Generator().manual_seed(100 + seed)
    B, T, V = 1 + seed, 3 + 2 * seed, 5 + 7 * seed
    s, t = _logits(B, T, V, seed=seed), _logits(B, T, V, seed=seed + 50)
    y = torch.randint(0, V, (B, T), generator=g)
    y[0, 0] = -1  # an ignored position counts in neither term
    weight = torch.rand((), generator=g).item()
    temperature = 0.5 + 2 * torch.rand((), generator=g).item()
    got = distillation_loss(s, t, y, weight=weight, temperature=temperature)
    assert got.item() == pytest.approx(_reference(s, t, y, weight, temperature), rel=1e-5)


def test_weight_zero_is_the_plain_loss_and_weight_one_ignores_the_text():
    s, t = _logits(2, 6, 11, seed=1), _logits(2, 6, 11, seed=2)
    y = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(3))
    plain = F.cross_entropy(s.reshape(-1, 11), y.reshape(-1))
    assert distillation_loss(s, t, y, weight=0.0).item() == pytest.approx(plain.item(), rel=1e-6)
    other_y = (y + 1) % 11
    a = distillation_loss(s, t, y, weight=1.0, temperature=2.0)
    b = distillation_loss(s, t, other_y, weight=1.0, temperature=2.0)
    assert a.item() == pytest.approx(b.item(), rel=1e-12)


def test_soft_term_is_minimal_where_the_student_matches_the_teacher():
    # CE(p, q) >= H(p), with equality at q = p: its gradient vanishes there
    t = _logits(3, 4, 9, seed=7)
    s = t.clone().requires_grad_(True)
    y = torch.zeros(3, 4, dtype=torch.long)
    loss = distillation_loss(s, t, y, weight=1.0, temperature=1.5)
    (grad,) = torch.autograd.grad(loss, s)
    assert grad.abs().max().item() < 1e-12
    entropy = -(torch.softmax(t / 1.5, -1) * torch.log_softmax(t / 1.5, -1)).sum(-1).mean()
    assert loss.item() == pytest.approx(1.5**2 * entropy.item(), rel=1e-10)
    moved = distillation_loss(s.detach() + _logits(3, 4, 9, seed=8), t, y, weight=1.0)
    assert moved.item() > distillation_loss(t, t, y, weight=1.0).item()


@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0])
def test_every_position_ignored_gives_zero_not_nan(weight):
    s, t = _logits(1, 3, 5, seed=1), _logits(1, 3, 5, seed=2)
    y = torch.full((1, 3), -1)
    assert distillation_loss(s, t, y, weight=weight).item() == 0.0


def test_mismatched_vocabularies_are_a_clear_error():
    with pytest.raises(ModelConfigError, match="same vocabulary"):
        distillation_loss(
            _logits(1, 2, 5, seed=0), _logits(1, 2, 6, seed=0), torch.zeros(1, 2), weight=0.5
        )


def _gpt(seed, n_embd=32, block_size=16):
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=23, block_size=block_size, n_layer=2, n_head=2, n_embd=n_embd)
    return GPT(cfg)


def test_objective_trains_the_student_and_leaves_the_teacher_alone():
    student, teacher = _gpt(0), _gpt(1, n_embd=48)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    objective = Distillation(student, teacher, weight=0.6, temperature=2.0)
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    x = torch.randint(0, 23, (3, 16), generator=torch.Generator().manual_seed(4))
    y = torch.randint(0, 23, (3, 16), generator=torch.Generator().manual_seed(5))
    logits, loss = objective(x, y)
    assert logits is None
    with torch.no_grad():
        s_logits, _ = student(x)
        t_logits, _ = teacher(x)
    expected = distillation_loss(s_logits, t_logits, y, weight=0.6, temperature=2.0)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    loss.backward()
    assert all(p.grad is not None for p in student.parameters())
    assert all(p.grad is None for p in teacher.parameters())
    opt = torch.optim.Adam(student.parameters(), lr=1e-2)
    first = loss.item()
    for _ in range(20):
        opt.zero_grad()
        _, loss = objective(x, y)
        loss.backward()
        opt.step()
    assert loss.item() < first - 0.1
    for k, v in teacher.state_dict().items():
        assert torch.equal(v, before[k]), k


@pytest.mark.parametrize(
    ("weight", "temperature", "match"),
    [
        (-0.1, 1.0, "weight"),
        (1.5, 1.0, "weight"),
        (0.5, 0.0, "temperature"),
        (0.5, math.nan, "temperature"),
    ],
)
def test_bad_settings_are_refused(weight, temperature, match):
    with pytest.raises(ModelConfigError, match=match):
        Distillation(_gpt(0), _gpt(1), weight=weight, temperature=temperature)
