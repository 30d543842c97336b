"""Random-weight artifacts for any config: test material for this package and the C engine.

    tables = synthetic_tables("bpe", 512, seed=0)      # 256 bytes + merges + <|endoftext|>
    spec = ModelSpec(512, 64, 6, 8, 256, bias=True, bos_token=tables.special_ids[0])
    data = synthetic_artifact(spec, tables, seed=0)    # bytes of a valid .gsm file

Everything is a pure function of its arguments and seed (numpy's PCG64 generator), so a C test
and a Python test that ask for the same artifact get the same bytes.
"""

from __future__ import annotations

import numpy as np

from .artifact import artifact_bytes
from .errors import QuantError
from .format import required_tensors
from .layout import ModelSpec
from .quantize import quantize_tensors
from .tables import TokenizerTables

SPECIAL_TOKENS = [b"<|endoftext|>", b"<|pad|>", b"<|user|>", b"<|assistant|>"]

# Multi-byte UTF-8 characters that synthetic BPE tables build by merges, so that a token can end
# inside a character (exercises the streaming decoder of FORMAT.md section 10).
_UTF8_CHARS = ["é", "ü", "ß", "€", "中", "文", "😀"]
# Code points of synthetic char vocabularies beyond ASCII: Latin-1, Greek, CJK, emoji.
_EXTRA_CHARS = "éüßçñøÆ€£αβγλΩ中文字😀🙂"

# GPT-2 initialization (nanoGPT model.py): N(0, 0.02), residual projections scaled by
# 1/sqrt(2 L) "per GPT-2 paper".
_INIT_STD = 0.02


def synthetic_tables(
    kind: str = "bpe",
    n_tokens: int = 512,
    *,
    seed: int = 0,
    n_special: int = 1,
    pattern: str | None = "gpt2",
) -> TokenizerTables:
    """Tokenizer tables of n_tokens tokens (Vt), the last n_special of them special.

    BPE: the 256 one-byte tokens at seeded random ids among 0..255, then merged tokens (each the
    concatenation of two earlier tokens, mostly ASCII words and some UTF-8 characters built byte
    by byte), then the special tokens. Char: n_tokens - n_special code points (ASCII, then
    non-ASCII) sorted by code point as nanoGPT's char tokenizer does, then special tokens.
    """
    if not 0 <= n_special <= len(SPECIAL_TOKENS):
        raise QuantError(f"n_special is {n_special}, expected 0 .. {len(SPECIAL_TOKENS)}")
    rng = np.random.default_rng(seed)
    n_ordinary = n_tokens - n_special
    special = SPECIAL_TOKENS[:n_special]
    if kind == "char":
        pool = "\n" + "".join(chr(c) for c in range(32, 127)) + _EXTRA_CHARS
        if not 1 <= n_ordinary <= len(pool):
            raise QuantError(
                f"a synthetic char vocabulary has 1 .. {len(pool)} ordinary tokens, "
                f"asked for {n_ordinary}"
            )
        chars = sorted(rng.choice(list(pool), size=n_ordinary, replace=False).tolist())
        tokens = [c.encode() for c in chars] + special
        return TokenizerTables("char", None, tokens, list(range(n_ordinary, n_tokens)))
    if kind != "bpe":
        raise QuantError(f"kind {kind!r} is unknown: use 'bpe' or 'char'")
    if n_ordinary < 256:
        raise QuantError(
            f"byte-level BPE needs at least 256 ordinary tokens, asked for {n_ordinary}"
        )
    tokens: list[bytes] = [bytes([b]) for b in rng.permutation(256).tolist()]
    known = set(tokens)

    def add(tok: bytes) -> None:
        if tok not in known and len(tokens) < n_ordinary:
            tokens.append(tok)
            known.add(tok)

    for ch in _UTF8_CHARS:  # built left to right: b"\xe2\x82", then b"\xe2\x82\xac"
        raw = ch.encode()
        for end in range(2, len(raw) + 1):
            add(raw[:end])
    letters = [bytes([c]) for c in b"etaoinshrdlucmfwypvbgk ETAOINS.,'\n"]
    words = list(letters)
    while len(tokens) < n_ordinary:
        left = words[rng.integers(len(words))]
        source = letters if rng.random() < 0.8 else words
        right = source[rng.integers(len(source))]
        tok = left + right
        if len(tok) <= 12 and tok not in known:
            add(tok)
            words.append(tok)
    return TokenizerTables("bpe", pattern, tokens + special, list(range(n_ordinary, n_tokens)))


def synthetic_weights(
    spec: ModelSpec, *, seed: int = 0, style: str = "random"
) -> dict[str, np.ndarray]:
    """Float32 tensors for every name of FORMAT.md section 4.

    style "random": GPT-2 initialization, with LayerNorm weights 1 ± 0.1 and small nonzero biases so
    every term of the arithmetic is exercised. style "trained": what trained GPTs look like to a
    quantizer: larger weights with heavy tails (Student-t, 5 degrees of freedom), log-normal row
    norms, and a few LayerNorm channels with large gains (the outlier features of LLM.int8,
    Dettmers et al. 2022), so per-row and per-vector scales are actually stressed.
    """
    if style not in ("random", "trained"):
        raise QuantError(f"style {style!r} is unknown: use 'random' or 'trained'")
    rng = np.random.default_rng(seed)
    L, C = spec.n_layer, spec.n_embd
    outliers = rng.choice(C, size=max(1, C // 64), replace=False)
    out: dict[str, np.ndarray] = {}
    for name, _, shape in required_tensors(spec):
        if name.endswith(".bias"):
            w = rng.normal(0.0, 0.02 if style == "random" else 0.05, shape)
        elif len(shape) == 1:  # LayerNorm weight
            w = 1.0 + rng.normal(0.0, 0.1, shape)
            if style == "trained":
                w = np.abs(w) * rng.uniform(0.5, 1.5)
                w[outliers] *= 4.0
        else:
            std = _INIT_STD / np.sqrt(2 * L) if name.endswith("c_proj.weight") else _INIT_STD
            if style == "random":
                w = rng.normal(0.0, std, shape)
            else:
                w = rng.standard_t(5, shape) * (2 * std)
                w *= rng.lognormal(0.0, 0.5, (shape[0], 1))
        out[name] = w.astype(np.float32)
    return out


def synthetic_artifact(
    spec: ModelSpec,
    tables: TokenizerTables,
    *,
    seed: int = 0,
    style: str = "random",
    clip: bool = False,
) -> bytes:
    """The bytes of a valid artifact with synthetic_weights(spec, seed, style) quantized."""
    return artifact_bytes(
        spec,
        tables,
        quantize_tensors(spec, synthetic_weights(spec, seed=seed, style=style), clip=clip),
    )
