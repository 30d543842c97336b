"""How gptstack.cuda_ops is checked: one error measure and one tolerance table.

    rel = rel_error(out, ref)                 # ||out - ref|| / ||ref||, in float64
    assert_close(out, ref, torch.bfloat16, "layernorm dx")
    philox4x32_10(counter, key)               # csrc/philox.h on Python ints, rebuilt apart

Tolerances follow ../../../../docs/MEASURING.md rule 5 ("relative error under 1e-5
(fp32), under 1e-2 (bf16)"); float64 gets 1e-10 (the kernels compute float64 in double). The
reference is always computed in float64 from the same (rounded) inputs. Used by the tests, the
GPU check script and the bench candidates' self-check.
"""

from __future__ import annotations

import torch

TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 1e-2}
# A reference whose RMS is below this is zero up to rounding (e.g. dweight of a LayerNorm over
# C = 1, exactly 0 in float32 and 1e-16 in float64): its error is measured against this RMS.
ZERO_RMS = 1e-6


def rel_error(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """||out - ref|| / max(||ref||, ||scale||, sqrt(n) ZERO_RMS) (Frobenius), in float64.

    scale: a tensor of the size the computation works at, for a reference that is zero in exact
    arithmetic but not in rounding: e.g. dq and dk of attention over one key (softmax of one
    score is 1 whatever the score), where both sides return rounding noise of order eps * |dv|.
    """
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    if out.shape != ref.shape:
        raise AssertionError(f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    floor = 0.0 if scale is None else scale.detach().double().norm().item()
    denom = max(ref.norm().item(), floor, ref.numel() ** 0.5 * ZERO_RMS)
    diff = (out - ref).norm().item()
    return diff / denom if denom > 0 else diff


def assert_close(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype: torch.dtype,
    what: str,
    scale: torch.Tensor | None = None,
) -> float:
    """Raise AssertionError naming `what` if rel_error exceeds TOLERANCE[dtype]; returns it."""
    rel = rel_error(out, ref, scale)
    tol = TOLERANCE[dtype]
    if not rel <= tol:  # also catches NaN
        worst = (out.detach().double().cpu() - ref.detach().double().cpu()).abs().argmax()
        raise AssertionError(
            f"{what}: relative error {rel:.3e} > {tol:.0e} for {dtype}; worst element at flat "
            f"index {worst.item()}: {out.flatten()[worst].item()!r} vs "
            f"{ref.flatten()[worst].item()!r}"
        )
    return rel


MASK32 = 0xFFFFFFFF


def philox4x32_10(counter, key):
    """Philox4x32-10 (Salmon et al. 2011) on Python ints: counter (c0, c1, c2, c3), key (k0, k1)
    -> four 32-bit words. Written apart from csrc/philox.h, so tests of the random streams of
    attention dropout and token sampling compare two implementations, not one with itself."""
    (c0, c1, c2, c3), (k0, k1) = counter, key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3
