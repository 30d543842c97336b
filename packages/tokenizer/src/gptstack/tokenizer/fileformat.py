"""The tokenizer file format (`tokenizer.json`): constants and canonical bytes.

One JSON object, UTF-8, keys in this order:

    {"format": "gptstack-tokenizer", "version": 1, "kind": "char" | "bpe" | "gpt2",
     "pattern": "gpt2" | "gpt4" | null,
     "vocab": ["\\n", " ", "!", ...],        # char only: id i is vocab[i]
     "merges": [[left, right], ...],         # bpe only: merge i makes id 256 + i
     "special_tokens": {"<|endoftext|>": 50256, ...}}

A gpt2 file holds no vocabulary: the ranks come from GPT-2's ranks file (see `gpt2.py`).
The bytes written are canonical (fixed key order, fixed separators, one top-level key per
line), so the SHA-256 of a saved file is the tokenizer's `fingerprint()`.
"""

from __future__ import annotations

import json
from typing import Any

FORMAT_NAME = "gptstack-tokenizer"
FORMAT_VERSION = 1
KEY_ORDER = ("format", "version", "kind", "pattern", "vocab", "merges", "special_tokens")


def canonical_bytes(data: dict[str, Any]) -> bytes:
    """Serialize a tokenizer dict to its canonical file content (UTF-8 JSON, trailing newline).

    Keys follow `KEY_ORDER`; each top-level key sits on its own line so a diff stays readable.
    """
    assert set(data) <= set(KEY_ORDER), f"unexpected keys {set(data) - set(KEY_ORDER)}"
    lines = [
        f"  {json.dumps(key)}: {json.dumps(data[key], ensure_ascii=False, separators=(',', ':'))}"
        for key in KEY_ORDER
        if key in data
    ]
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode("utf-8")
