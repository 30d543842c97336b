"""The C engine against the numpy reference (gptstack.quant.reference) on the same artifacts.

Logits at every step of a run longer than block_size (the window slides), greedy tokens and
seeded sampled tokens, for a trained BPE tokenizer, a char tokenizer and the trained artifact
when it exists; the release build through ctypes, the ASan+UBSan and 32-bit builds through
gs-run, which must also agree bit for bit with the release build. Tolerances: gs_testlib.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import gs_testlib
from gs_testlib import assert_logits_close, assert_same_tokens, host_build, run_gs, teacher_ids
from gptstack.quant import Session, generate

SAMPLINGS = [
    pytest.param(dict(temperature=0.0), id="greedy"),
    pytest.param(dict(temperature=0.8, top_k=40, seed=7), id="t0.8-k40"),
    pytest.param(dict(temperature=1.0, top_k=0, seed=12345), id="t1.0-all"),
]


def steps_for(art) -> int:
    """64 steps, or enough to slide the window twice for a large block_size."""
    T = art.spec.block_size
    return max(64, 2 * T + 8)


def reference_logits(art, ids: list[int]) -> np.ndarray:
    session = Session(art)
    return np.stack([session.feed(t) for t in ids])


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
    model = engine.open(model_artifact.data)
    got = np.stack([model.forward(t) for t in ids])
    assert_logits_close(got, reference_logits(art, ids), model_artifact.name)
    pos = expected_pos(art.spec.block_size, len(ids))
    assert model.pos == pos and model.window() == ids[-pos:]


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_generation_matches_reference(engine, model_artifact, shakespeare_text, sampling):
    prompt = teacher_ids(model_artifact, shakespeare_text[1000:2000], 8)
    n_new = steps_for(model_artifact.art)
    want = generate(model_artifact.art, prompt, n_new, **sampling)
    model = engine.open(model_artifact.data)
    got = model.generate(prompt, n_new, **sampling)
    assert_same_tokens(model, model_artifact.art, prompt, got, want, model_artifact.name)


def test_reset_repeats_a_run(engine, bpe_artifact, shakespeare_text):
    prompt = teacher_ids(bpe_artifact, shakespeare_text[:500], 5)
    model = engine.open(bpe_artifact.data)
    first = model.generate(prompt, 40, temperature=0.9, top_k=20, seed=3)
    assert model.generate(prompt, 40, temperature=0.9, top_k=20, seed=3) == first


def _gs_run_case(build, artifact, ids: list[int], tmp_path, name: str) -> np.ndarray:
    """Feed ids through gs-run of this build; the dumped logits (steps, V)."""
    dump = tmp_path / f"{name}-{build.variant}.f32"
    run_gs(build.gs_run, artifact.path, "--ids", ",".join(map(str, ids)), "--tokens", 0,
           "--quiet", "--dump-logits", dump)
    return np.fromfile(dump, dtype="<f4").reshape(len(ids), artifact.art.spec.vocab_size)


def _gs_run_tokens(build, artifact, prompt: list[int], n_new: int, sampling: dict) -> list[int]:
    args = ["--ids", ",".join(map(str, prompt)), "--tokens", n_new, "--json"]
    if sampling.get("temperature", 1.0) <= 0:
        args.append("--greedy")
    else:
        args += ["--temperature", sampling["temperature"], "--top-k", sampling.get("top_k", 0),
                 "--seed", sampling.get("seed", 0)]
    return json.loads(run_gs(build.gs_run, artifact.path, *args).stdout)["tokens"]


@pytest.mark.parametrize("variant", ["asan", "m32"])
def test_variant_matches_reference(variant, release_build, engine, bpe_artifact, char_artifact,
                                   shakespeare_text, tmp_path):
    """ASan+UBSan (any memory error or UB aborts) and -m32 -mfpmath=sse: same logits as the
    reference, bit-identical to the release build, same tokens."""
    build = host_build(variant)
    for artifact in (bpe_artifact, char_artifact):
        ids = teacher_ids(artifact, shakespeare_text[4000:9000], 64)
        got = _gs_run_case(build, artifact, ids, tmp_path, artifact.name)
        assert_logits_close(got, reference_logits(artifact.art, ids), f"{variant} {artifact.name}")
        release = _gs_run_case(release_build, artifact, ids, tmp_path, artifact.name)
        assert np.array_equal(got.view(np.uint32), release.view(np.uint32)), (
            f"{variant} logits differ from the release build's on {artifact.name}")
        model = engine.open(artifact.data)
        for sampling in (dict(temperature=0.0), dict(temperature=0.8, top_k=40, seed=11)):
            want = generate(artifact.art, ids[:6], 40, **sampling)
            got = _gs_run_tokens(build, artifact, ids[:6], 40, sampling)
            assert_same_tokens(model, artifact.art, ids[:6], got, want,
                               f"{variant} {artifact.name}")


@pytest.mark.slow
def test_openmp_variant_is_bit_identical(release_build, bpe_artifact, shakespeare_text, tmp_path):
    """-O3 -march=native -fopenmp: threads over rows and vectorized int8 dots change nothing."""
    build = host_build("openmp")
    ids = teacher_ids(bpe_artifact, shakespeare_text[4000:9000], 48)
    got = _gs_run_case(build, bpe_artifact, ids, tmp_path, "omp")
    release = _gs_run_case(release_build, bpe_artifact, ids, tmp_path, "omp")
    assert np.array_equal(got.view(np.uint32), release.view(np.uint32))


def test_tolerance_rejects_a_wrong_engine(bpe_artifact, shakespeare_text):
    """The tolerance is not vacuous: logits of the same artifact one position off (what a
    position bug would give) fail it."""
    art = bpe_artifact.art
    ids = teacher_ids(bpe_artifact, shakespeare_text[4000:9000], 32)
    ref = reference_logits(art, ids)
    shifted = reference_logits(art, [ids[0]] + ids[:-1])
    with pytest.raises(AssertionError):
        gs_testlib.assert_logits_close(shifted, ref, "shifted")


def test_token_check_rejects_an_unexplained_divergence(engine, bpe_artifact, shakespeare_text):
    """assert_same_tokens admits only flip-explained divergences: tokens of another seed, with
    logits that agree, fail it."""
    prompt = teacher_ids(bpe_artifact, shakespeare_text[1000:2000], 8)
    model = engine.open(bpe_artifact.data)
    want = generate(bpe_artifact.art, prompt, 40, 1.0, 0, seed=1)
    other = model.generate(prompt, 40, 1.0, 0, seed=2)
    assert other != want
    with pytest.raises(AssertionError):
        assert_same_tokens(model, bpe_artifact.art, prompt, other, want, "other seed")
