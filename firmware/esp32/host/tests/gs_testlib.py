"""Helpers of the C engine tests (imported by conftest.py as `gs_testlib`): toolchain checks,
host builds, artifact records, running gs-run, and the logits tolerance.

Tolerance (used by every C-vs-numpy logits comparison): the integer dot products are exact on
both sides, but float32 sums run in a different order (C sequentially as FORMAT.md section 7
writes them, numpy pairwise and through BLAS) and expf/tanhf differ from numpy's by an ulp, so a
logit differs by float32 rounding, about 1e-7 of the logit range. Those tiny differences feed the
dynamic int8 quantization of the next activation, and once in a while a value sits so close to a
rounding boundary (k + 0.5 after scaling by 127 / max|x|) that C and numpy round it to
neighbouring int8 values; that step's logits then differ by up to a few percent of their range.
Measured over 30 synthetic artifacts x 64 steps: no step beyond 4e-2, and at most 12% of the
steps of one run beyond 1e-5 (most runs none). So every step must be within LOOSE of the range,
and at least MIN_TIGHT_FRACTION of the steps within TIGHT; a real bug (a wrong scale, position,
bias, order of operations) moves almost every step by O(1).

Tokens (greedy and seeded sampling) must be identical. The one admitted exception is the same
rounding flip: when two candidates are nearly tied, a flip can swap them and the runs part. So a
divergence passes only if, fed the same ids up to that step, the two logits differ by more than
TIGHT (a flip happened there) and by no more than LOOSE; the sampler itself is tested on
identical logits (test_engine_sampling.py), where it must agree exactly. The suite's fixed cases
currently all agree token for token.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

REQUIRE_TOOLCHAINS = bool(os.environ.get("GPTSTACK_REQUIRE_TOOLCHAINS"))

TIGHT = 1e-5
LOOSE = 0.1
MIN_TIGHT_FRACTION = 0.75


def missing_tool(what: str, install: str) -> None:
    """Skip (or, with GPTSTACK_REQUIRE_TOOLCHAINS, fail) because a tool is not installed."""
    message = f"{what} is not available: {install}"
    if REQUIRE_TOOLCHAINS:
        pytest.fail(f"{message} (GPTSTACK_REQUIRE_TOOLCHAINS is set, so this is an error)")
    pytest.skip(message)


def require_program(name: str, install: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing_tool(name, install)
    return path


_BUILDS: dict[str, object] = {}


def host_build(variant: str):
    """build_host(variant), once per session; skips/fails when its toolchain is missing."""
    from gptstack.tools.firmware_host import build_host, check_toolchain

    if variant not in _BUILDS:
        try:
            check_toolchain(variant)
        except Exception as e:  # GptstackError, not imported here: that pulls in torch (~10 s)
            if type(e).__name__ != "GptstackError":
                raise
            missing_tool(f"the {variant} host toolchain", str(e))
        _BUILDS[variant] = build_host(variant)
    return _BUILDS[variant]



@dataclass
class ArtifactCase:
    """One artifact for the tests: its bytes on disk, the Python reader's view, its tokenizer."""

    name: str
    path: Path
    data: bytes
    art: object                 # gptstack.quant.Artifact
    tokenizer: object | None    # gptstack.tokenizer.Tokenizer the tables came from, if any

    @property
    def tables(self):
        return self.art.tables


def teacher_ids(artifact: ArtifactCase, text: str, n: int) -> list[int]:
    """n ids of `text` encoded by the reference encoder (repeated if short): a realistic,
    deterministic input sequence. A GPT-4-pattern tokenizer (no prompt encoding, FORMAT.md
    section 10) gets seeded random ordinary ids instead."""
    from gptstack.quant import PromptEncoder

    tables = artifact.tables
    if tables.kind == "bpe" and tables.pattern != "gpt2":
        rng = np.random.default_rng(len(text))
        return [int(i) for i in rng.choice(tables.sorted_ids, size=n)]
    ids = PromptEncoder(tables).encode(text)
    while len(ids) < n:
        ids = ids + ids
    return ids[:n]


def assert_logits_close(c: np.ndarray, r: np.ndarray, what: str) -> None:
    """C logits c (steps, V) against reference logits r (steps, V), per the module docstring."""
    assert c.shape == r.shape, f"{what}: shapes {c.shape} vs {r.shape}"
    scale = np.abs(r).max(axis=1, keepdims=True)
    rel = (np.abs(c - r) / scale).max(axis=1)
    worst = int(np.argmax(rel))
    assert (rel <= LOOSE).all(), f"{what}: step {worst} differs by {rel[worst]:.3g} of its range"
    tight = float((rel <= TIGHT).mean())
    assert tight >= MIN_TIGHT_FRACTION, (
        f"{what}: only {tight:.0%} of the steps agree to {TIGHT} (worst {rel.max():.3g})")


def run_gs(program: Path, *args: str, check: bool = True, timeout: float = 120,
           **kwargs) -> subprocess.CompletedProcess:
    """Run a host program, text output; raise with its stderr on failure when check."""
    proc = subprocess.run([str(program), *map(str, args)], capture_output=True, text=True,
                          errors="replace",
                          timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"{program.name} {' '.join(map(str, args))[:200]} exited "
                             f"{proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc


def assert_same_tokens(model, art, prompt: list[int], got: list[int], want: list[int],
                       what: str) -> None:
    """C tokens `got` equal reference tokens `want`, or part at an explained flip (see above).
    model: a gs_engine_ctypes.Model of the same artifact (release build)."""
    from gptstack.quant import Session

    if got == want:
        return
    assert len(got) == len(want), f"{what}: {len(got)} tokens, reference {len(want)}"
    i = next(k for k, (a, b) in enumerate(zip(got, want)) if a != b)
    fed = list(prompt) + list(want[:i])
    session = Session(art)
    model.reset()
    for t in fed:
        ref, c = session.feed(t), model.forward(t)
    rel = float(np.abs(c - ref).max() / np.abs(ref).max())
    assert TIGHT < rel <= LOOSE, (
        f"{what}: token {i} is {got[i]}, reference {want[i]}, with logits that differ by {rel:.3g} "
        f"of their range (a flip would be in ({TIGHT}, {LOOSE}])")
