"""Helpers of the C engine tests (imported by conftest.py as `gs_testlib`): toolchain checks,
host builds, artifact records, running gs-run, and the exact comparison with the reference.

C and numpy agree bit for bit (FORMAT.md section 7): the integer dot products are exact on both
sides, and every float operation is pinned: IEEE basic operations only, in one order, every sum
sequential from its first term, exp and tanh defined by the format (gs_math.c and
gptstack.quant.fmath) instead of a C library's. So logits must be identical to the bit at every
step, and greedy and seeded-sampled tokens identical, on every build variant. There is no
tolerance: any difference, even one ulp, is a bug on one side.
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
    art: object  # gptstack.quant.Artifact
    tokenizer: object | None  # gptstack.tokenizer.Tokenizer the tables came from, if any

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


def assert_logits_equal(c: np.ndarray, r: np.ndarray, what: str) -> None:
    """C logits c (steps, V) equal reference logits r (steps, V) bit for bit (float32 bits, so
    -0 vs +0 and NaN payloads count too)."""
    assert c.shape == r.shape, f"{what}: shapes {c.shape} vs {r.shape}"
    c, r = np.asarray(c, np.float32), np.asarray(r, np.float32)
    differ = (c.view(np.uint32) != r.view(np.uint32)).any(axis=1)
    if differ.any():
        step = int(np.argmax(differ))
        diff = float(np.abs(c[step].astype(np.float64) - r[step]).max())
        raise AssertionError(
            f"{what}: {int(differ.sum())} of {len(c)} steps differ, the first "
            f"at step {step} (max |diff| {diff:.3g} there)"
        )


def run_gs(
    program: Path, *args: str, check: bool = True, timeout: float = 120, **kwargs
) -> subprocess.CompletedProcess:
    """Run a host program, text output; raise with its stderr on failure when check."""
    proc = subprocess.run(
        [str(program), *map(str, args)],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        **kwargs,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{program.name} {' '.join(map(str, args))[:200]} exited "
            f"{proc.returncode}:\n{proc.stderr[-2000:]}"
        )
    return proc


def assert_same_tokens(got: list[int], want: list[int], what: str) -> None:
    """C tokens `got` equal the reference's `want`, with the first difference named."""
    if got != want:
        i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise AssertionError(
            f"{what}: {len(got)} tokens vs the reference's {len(want)}, first "
            f"difference at {i}: {got[i : i + 5]} vs {want[i : i + 5]}"
        )


_REFERENCE: dict[tuple, object] = {}


def reference_logits(artifact: ArtifactCase, ids: list[int]) -> np.ndarray:
    """The reference's Session.feed logits (steps, V) for these ids; computed once per session
    (several build variants compare against the same run)."""
    key = ("logits", artifact.name, tuple(ids))
    if key not in _REFERENCE:
        from gptstack.quant import Session

        session = Session(artifact.art)
        _REFERENCE[key] = np.stack([session.feed(t) for t in ids])
    return _REFERENCE[key]


def reference_tokens(
    artifact: ArtifactCase, prompt: list[int], n_new: int, sampling: dict
) -> list[int]:
    """gptstack.quant.generate(artifact, prompt, n_new, **sampling), once per session."""
    key = ("tokens", artifact.name, tuple(prompt), n_new, tuple(sorted(sampling.items())))
    if key not in _REFERENCE:
        from gptstack.quant import generate

        _REFERENCE[key] = generate(artifact.art, prompt, n_new, **sampling)
    return _REFERENCE[key]
