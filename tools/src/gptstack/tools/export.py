"""`gptstack export`: checkpoint -> int8 `.gsm` artifact + memory plan on a target.

The tokenizer reaches the artifact as plain tables (every token's bytes, the special ids, the
pre-tokenization pattern); gptstack.quant derives the pair table the C engine encodes with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gptstack.quant import (
    MemoryPlan,
    TokenizerTables,
    check_fits,
    memory_plan,
    quantize_checkpoint,
    write_artifact,
)
from gptstack.tokenizer import Tokenizer, load_tokenizer

from .checkpoint import read_meta, resolve_checkpoint
from .sample import prompt_ids


@dataclass
class ExportResult:
    path: Path
    plan: MemoryPlan

    @property
    def plan_text(self) -> str:
        return "\n".join(self.plan.lines())


def tokenizer_tables(tok: Tokenizer) -> TokenizerTables:
    """The artifact's view of a tokenizer (FORMAT.md section 3)."""
    if tok.kind == "char":
        kind, pattern = "char", None
    else:  # our byte-level BPE, or GPT-2's (a byte-level BPE with the GPT-2 pattern)
        kind, pattern = "bpe", tok.pattern_name
    return TokenizerTables(
        kind=kind,
        pattern=pattern,
        token_bytes=tok.token_bytes(),
        special_ids=sorted(tok.special_tokens.values()),
    )


def bos_token(tok: Tokenizer) -> int | None:
    """What the engine feeds for an empty prompt: the same start as `gptstack sample`."""
    start = prompt_ids(tok, "")
    return start[0] if len(start) == 1 else None


def export_checkpoint(
    ckpt_path: Path, out: Path, *, target: str = "esp32s3", clip: bool = False
) -> ExportResult:
    """Quantize a checkpoint, refuse it if it does not fit `target`, write the artifact."""
    ckpt = resolve_checkpoint(ckpt_path)
    read_meta(ckpt)
    tok = load_tokenizer(ckpt / "tokenizer.json")
    tables = tokenizer_tables(tok)
    spec, tensors = quantize_checkpoint(ckpt, tables, clip=clip, bos_token=bos_token(tok))
    plan = check_fits(memory_plan(spec, target, tables=tables))  # before writing anything
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_artifact(out, spec, tables, tensors)
    return ExportResult(out, plan)
