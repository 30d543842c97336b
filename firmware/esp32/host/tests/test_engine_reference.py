"""The C engine against the numpy reference (gptstack.quant.reference) on the same artifacts,
bit for bit (gs_testlib's docstring says why that holds).

Logits at every step of a run longer than block_size (the window slides), greedy tokens and
seeded sampled tokens, for a trained BPE tokenizer with random weights, a char tokenizer and the
trained artifact when it exists: the release build through ctypes, and the ASan+UBSan, 32-bit and
-O3 -march=native OpenMP builds through gs-run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from gs_testlib import (
    assert_logits_equal,
    assert_same_tokens,
    host_build,
    reference_logits,
    reference_tokens,
    run_gs,
    teacher_ids,
)

SAMPLINGS = [
    pytest.param(dict(temperature=0.0), id="greedy"),
    pytest.param(dict(temperature=0.8, top_k=40, seed=7), id="t0.8-k40"),
    pytest.param(dict(temperature=1.0, top_k=0, seed=12345), id="t1.0-all"),
]


def steps_for(art) -> int:
    """64 steps, or enough to slide the window twice for a large block_size."""
    T = art.spec.block_size
    return max(64, 2 * T + 8)


def expected_pos(T: int, n_fed: int) -> int:
    """pos after n_fed tokens with FORMAT.md section 8's slide."""
    pos = 0
    for _ in range(n_fed):
        pos = T // 2 if pos == T else pos
        pos += 1
    return pos


def test_logits_every_step(engine, model_artifact, shakespeare_text):
    art = model_artifact.art
    ids = teacher_ids(model_artifact, shakespeare_text[4000:9000], steps_for(art))
    assert len(ids) > art.spec.block_size  # the window slides
    model = engine.open(model_artifact.data)
    got = np.stack([model.forward(t) for t in ids])
    assert_logits_equal(got, reference_logits(model_artifact, ids), model_artifact.name)
    pos = expected_pos(art.spec.block_size, len(ids))
    assert model.pos == pos and model.window() == ids[-pos:]


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_generation_matches_reference(engine, model_artifact, shakespeare_text, sampling):
    prompt = teacher_ids(model_artifact, shakespeare_text[1000:2000], 8)
    n_new = steps_for(model_artifact.art)
    want = reference_tokens(model_artifact, prompt, n_new, sampling)
    got = engine.open(model_artifact.data).generate(prompt, n_new, **sampling)
    assert_same_tokens(got, want, f"{model_artifact.name} {sampling}")


def test_reset_repeats_a_run(engine, bpe_artifact, shakespeare_text):
    prompt = teacher_ids(bpe_artifact, shakespeare_text[:500], 5)
    model = engine.open(bpe_artifact.data)
    first = model.generate(prompt, 40, temperature=0.9, top_k=20, seed=3)
    assert model.generate(prompt, 40, temperature=0.9, top_k=20, seed=3) == first


def _gs_run_logits(build, artifact, ids: list[int], tmp_path) -> np.ndarray:
    """Feed ids through gs-run of this build; the dumped logits (steps, V)."""
    dump = tmp_path / f"{artifact.name}-{build.variant}.f32"
    run_gs(
        build.gs_run,
        artifact.path,
        "--ids",
        ",".join(map(str, ids)),
        "--tokens",
        0,
        "--quiet",
        "--dump-logits",
        dump,
    )
    return np.fromfile(dump, dtype="<f4").reshape(len(ids), artifact.art.spec.vocab_size)


def _gs_run_tokens(build, artifact, prompt: list[int], n_new: int, sampling: dict) -> list[int]:
    args = ["--ids", ",".join(map(str, prompt)), "--tokens", n_new, "--json"]
    if sampling.get("temperature", 1.0) <= 0:
        args.append("--greedy")
    else:
        args += [
            "--temperature",
            sampling["temperature"],
            "--top-k",
            sampling.get("top_k", 0),
            "--seed",
            sampling.get("seed", 0),
        ]
    return json.loads(run_gs(build.gs_run, artifact.path, *args).stdout)["tokens"]


# asan: ASan + UBSan, any memory error or UB aborts; m32: -m32 -mfpmath=sse; openmp: -O3
# -march=native (FMA and AVX available: -ffp-contract=off must keep them out of float math)
# with OpenMP threads over rows. Slow: the OpenMP build (compiles longest when it must) and the
# trained model under ASan (about 14 s).
VARIANT_CASES = [
    pytest.param(
        variant,
        name,
        id=f"{name}-{variant}",
        marks=[pytest.mark.slow]
        if variant == "openmp" or (variant, name) == ("asan", "trained")
        else [],
    )
    for variant in ("asan", "m32", "openmp")
    for name in ("bpe", "char", "trained")
]


@pytest.mark.parametrize("variant, name", VARIANT_CASES)
def test_variant_matches_reference(variant, name, request, shakespeare_text, tmp_path):
    """Every build variant: logits of a sliding run and greedy and sampled tokens, bit for bit."""
    build = host_build(variant)
    artifact = request.getfixturevalue(f"{name}_artifact")
    art = artifact.art
    ids = teacher_ids(artifact, shakespeare_text[4000:9000], steps_for(art))
    got = _gs_run_logits(build, artifact, ids, tmp_path)
    assert_logits_equal(got, reference_logits(artifact, ids), f"{variant} {name}")
    prompt, n_new = ids[:6], steps_for(art)
    for sampling in (dict(temperature=0.0), dict(temperature=0.8, top_k=40, seed=11)):
        assert_same_tokens(
            _gs_run_tokens(build, artifact, prompt, n_new, sampling),
            reference_tokens(artifact, prompt, n_new, sampling),
            f"{variant} {name} {sampling}",
        )


def test_exact_check_catches_one_ulp(bpe_artifact, shakespeare_text):
    """The comparison has no slack: one logit one ulp off, or a -0 for a +0, fails it."""
    ids = teacher_ids(bpe_artifact, shakespeare_text[4000:9000], 16)
    ref = reference_logits(bpe_artifact, ids)
    assert_logits_equal(ref.copy(), ref, "itself")
    nudged = ref.copy()
    nudged[11, 7] = np.nextafter(nudged[11, 7], np.float32(np.inf))
    with pytest.raises(AssertionError, match="1 of 16 steps differ, the first at step 11"):
        assert_logits_equal(nudged, ref, "nudged")
    zero = np.zeros((1, 4), np.float32)
    with pytest.raises(AssertionError):
        assert_logits_equal(-zero, zero, "signed zero")
    with pytest.raises(AssertionError, match="first difference at 2"):
        assert_same_tokens([1, 2, 3], [1, 2, 4], "tokens")
