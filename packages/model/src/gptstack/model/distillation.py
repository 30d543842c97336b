"""Knowledge distillation: a small model learns from a larger model's predictions as well as
from the text.

    teacher = load_checkpoint("runs/esp32-teacher").model          # frozen, any size
    objective = Distillation(model, teacher, weight=0.5, temperature=1.0)
    step = TrainStep(objective, model.parameters(), optimizer, ...)  # objective(x, y) -> (_, loss)

Hinton, Vinyals & Dean 2015 ("Distilling the Knowledge in a Neural Network"). Besides the next
token of the text (the hard target), the student is trained towards the teacher's distribution
over the whole vocabulary at every position (the soft target), which says how plausible every
other token was. On a small corpus the hard targets are learnt by heart within a few epochs;
the soft targets are more signal from the same text, and they are smoother than one-hot labels.

    loss = (1 - weight) * CE(next token, student)
           + weight * T^2 * CE(softmax(teacher / T), log_softmax(student / T))

(T^2 keeps the soft term's gradient scale independent of the temperature T, as in the paper.)
The teacher runs in no-grad mode on the same (B, T) windows; its weights never change. Every
operation has a fixed shape and no host synchronisation, so the objective is captured in the
whole-step CUDA graph like the plain loss.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .errors import ModelConfigError


def distillation_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    targets: Tensor,
    *,
    weight: float,
    temperature: float = 1.0,
) -> Tensor:
    """The mixed objective above, averaged over positions whose target is not -1.

    student_logits, teacher_logits: (..., V); targets: (...) int64 token ids, -1 = ignore.
    weight 0 is the plain cross-entropy, weight 1 the soft term alone.
    """
    if student_logits.shape != teacher_logits.shape:
        raise ModelConfigError(
            f"student logits {tuple(student_logits.shape)} and teacher logits "
            f"{tuple(teacher_logits.shape)} differ: the two models need the same vocabulary"
        )
    V = student_logits.size(-1)
    dtype = torch.promote_types(student_logits.dtype, torch.float32)  # bf16 logits: in fp32
    s = student_logits.reshape(-1, V).to(dtype)
    t = teacher_logits.reshape(-1, V).to(dtype)
    y = targets.reshape(-1)
    kept = (y != -1).to(dtype)
    hard = F.cross_entropy(s, y.clamp(min=0), reduction="none")  # (N,)
    soft_targets = F.softmax(t / temperature, dim=-1)
    soft = -(soft_targets * F.log_softmax(s / temperature, dim=-1)).sum(-1)  # (N,)
    per_position = (1.0 - weight) * hard + weight * temperature**2 * soft
    # a mean over the kept positions without boolean indexing (a data-dependent shape would
    # synchronise the host and could not be captured in a CUDA graph); 0 if none is kept
    return (per_position * kept).sum() / kept.sum().clamp(min=1.0)


class Distillation:
    """`objective(x, y) -> (None, loss)`: the training step's loss with a frozen teacher.

    student: the model being trained, or a compiled / data-parallel wrapper of it, called as
    student(x) -> (logits, None). teacher: a GPT with the same vocabulary and a context at least
    as long as the training windows; it is put in eval mode and its gradients are switched off.
    """

    def __init__(
        self, student: Callable, teacher: nn.Module, *, weight: float, temperature: float = 1.0
    ) -> None:
        if not 0.0 <= weight <= 1.0:
            raise ModelConfigError(f"the distillation weight must be in [0, 1], got {weight}")
        if not temperature > 0.0:
            raise ModelConfigError(f"the distillation temperature must be > 0, got {temperature}")
        self.student, self.teacher = student, teacher.eval().requires_grad_(False)
        self.weight, self.temperature = weight, temperature

    def __call__(self, x: Tensor, y: Tensor) -> tuple[None, Tensor]:
        with torch.no_grad():
            teacher_logits, _ = self.teacher(x)
        student_logits, _ = self.student(x)
        loss = distillation_loss(
            student_logits, teacher_logits, y, weight=self.weight, temperature=self.temperature
        )
        return None, loss
