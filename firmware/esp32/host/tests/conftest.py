"""Fixtures of the C engine tests: host builds, the ctypes engine and test artifacts.

Builds come from gptstack.tools.firmware_host.build_host (the one way to build). A variant whose
toolchain is missing (gcc-multilib for m32, clang for libFuzzer, ...) is skipped with the install
command, unless GPTSTACK_REQUIRE_TOOLCHAINS is set (CI installs everything): then it fails.

Artifacts (session-scoped, written once under pytest's tmp dir):
  bpe      byte-level BPE trained on Tiny Shakespeare (gptstack.tokenizer.train_bpe), padded vocab,
           biases, "trained"-style random weights, block_size 16 (64-token runs slide 6 times)
  char     CharTokenizer of the same text, no biases, no bos_token, block_size 32
  utf8     synthetic BPE tables whose merges build multi-byte UTF-8 characters (streaming decode)
  gpt2     GPT-2's 50257 tokens with a tiny model (prompt encoding against tiktoken)
  trained  firmware/esp32/data/model.gsm when that file exists

`lib` is the OLED library + simulator of the test_oled_* modules (host/sim/simlib.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
FIRMWARE = HERE.parents[1]
SIM_DIR = HERE.parent / "sim"
TRAINED_ARTIFACT = FIRMWARE / "data" / "model.gsm"


def _load_helper(name: str, folder: Path = HERE):
    """Import a helper module (pytest runs in importlib mode: no folder is on sys.path)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# test modules import these by name: `import gs_testlib`, `from gs_engine_ctypes import GsError`,
# and from host/sim `import simlib` (the OLED library through ctypes), `import gen_font`
gs_engine_ctypes = _load_helper("gs_engine_ctypes")
gs_testlib = _load_helper("gs_testlib")
simlib = _load_helper("simlib", SIM_DIR)
_load_helper("gen_font", SIM_DIR)
ArtifactCase = gs_testlib.ArtifactCase


@pytest.fixture(scope="session")
def release_build():
    return gs_testlib.host_build("release")


@pytest.fixture(scope="session")
def engine(release_build):
    return gs_engine_ctypes.Engine(release_build.engine_lib)


@pytest.fixture(scope="session")
def lib():
    """The OLED library and SSD1306 simulator (libgs_sim.so of the release build), prototyped."""
    return simlib.load()


def _tables_of(tokenizer):
    from gptstack.quant import TokenizerTables

    kind = "char" if tokenizer.kind == "char" else "bpe"
    return TokenizerTables(
        kind,
        tokenizer.pattern_name if kind == "bpe" else None,
        tokenizer.token_bytes(),
        sorted(tokenizer.special_tokens.values()),
    )


def _write(folder: Path, name: str, data: bytes, tokenizer) -> ArtifactCase:
    from gptstack.quant import read_artifact

    path = folder / f"{name}.gsm"
    path.write_bytes(data)
    return ArtifactCase(name, path, data, read_artifact(data), tokenizer)


def _quantized(spec, tables, *, seed: int, style: str) -> bytes:
    from gptstack.quant import artifact_bytes, quantize_tensors, synthetic_weights

    weights = synthetic_weights(spec, seed=seed, style=style)
    return artifact_bytes(spec, tables, quantize_tensors(spec, weights))


@pytest.fixture(scope="session")
def artifact_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gsm")


@pytest.fixture(scope="session")
def bpe_artifact(artifact_dir, shakespeare_text) -> ArtifactCase:
    from gptstack.quant import ModelSpec
    from gptstack.tokenizer import train_bpe

    tok = train_bpe(shakespeare_text[:100_000], 400, special_tokens=["<|endoftext|>"])
    tables = _tables_of(tok)
    V = (tables.n_tokens + 63) // 64 * 64  # padded rows [Vt, V), as the esp32 preset pads
    spec = ModelSpec(V, 16, 2, 4, 64, bias=True, bos_token=tok.special_tokens["<|endoftext|>"])
    return _write(artifact_dir, "bpe", _quantized(spec, tables, seed=1, style="trained"), tok)


@pytest.fixture(scope="session")
def char_artifact(artifact_dir, shakespeare_text) -> ArtifactCase:
    from gptstack.quant import ModelSpec
    from gptstack.tokenizer import CharTokenizer

    tok = CharTokenizer.from_text(shakespeare_text[:200_000])
    tables = _tables_of(tok)
    spec = ModelSpec(tables.n_tokens, 32, 2, 2, 32, bias=False)
    return _write(artifact_dir, "char", _quantized(spec, tables, seed=2, style="random"), tok)


@pytest.fixture(scope="session")
def utf8_artifact(artifact_dir) -> ArtifactCase:
    from gptstack.quant import ModelSpec, synthetic_artifact, synthetic_tables

    tables = synthetic_tables("bpe", 420, seed=3, n_special=2)
    spec = ModelSpec(448, 8, 1, 2, 16, bias=True, bos_token=tables.special_ids[0])
    return _write(artifact_dir, "utf8", synthetic_artifact(spec, tables, seed=3), None)


@pytest.fixture(scope="session")
def gpt2_artifact(artifact_dir, data_dir) -> ArtifactCase:
    from gptstack.quant import ModelSpec
    from gptstack.tokenizer import gpt2_tokenizer

    tok = gpt2_tokenizer(data_dir / "gpt2.tiktoken")
    tables = _tables_of(tok)
    spec = ModelSpec(
        tables.n_tokens, 2, 1, 1, 4, bias=False, bos_token=tok.special_tokens["<|endoftext|>"]
    )
    return _write(artifact_dir, "gpt2", _quantized(spec, tables, seed=4, style="random"), tok)


@pytest.fixture(scope="session")
def trained_artifact(artifact_dir) -> ArtifactCase:
    if not TRAINED_ARTIFACT.is_file():
        pytest.skip(
            f"{TRAINED_ARTIFACT} not present: train and export the esp32 preset "
            "(`gptstack export ... -o firmware/esp32/data/model.gsm`) to test it"
        )
    data = TRAINED_ARTIFACT.read_bytes()
    return _write(artifact_dir, "trained", data, None)


@pytest.fixture(params=["bpe", "char", "trained"])
def model_artifact(request) -> ArtifactCase:
    """The artifacts the reference comparisons run on (trained only when it exists)."""
    return request.getfixturevalue(f"{request.param}_artifact")


@pytest.fixture(scope="session")
def rng() -> np.random.Generator:
    return np.random.default_rng(20240601)
