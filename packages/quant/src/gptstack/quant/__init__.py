"""gptstack.quant: int8 quantizer, the `.gsm` artifact, and the numpy reference of the C engine.

numpy + safetensors only (no torch). FORMAT.md beside this package is the byte-exact spec.

    spec, tensors = quantize_checkpoint("runs/esp32", tables)
    write_artifact("model.gsm", spec, tables, tensors)
    art = read_artifact("model.gsm")
    check_fits(memory_plan(art, "esp32s3"))
    ids = generate(art, PromptEncoder(art.tables).encode("ROMEO:"), 100, 0.8, 40, seed=1)

The reference reproduces the C engine bit for bit: FORMAT.md section 7 pins every float
operation, including exp and tanh (`fmath`) and the order of every sum.
"""

from . import fmath
from .artifact import Artifact, artifact_bytes, read_artifact, write_artifact
from .budget import BUDGETS, Budget, MemoryPlan, check_fits, feed_read_bytes, memory_plan
from .corrupt import Corruption, corrupted_artifacts
from .encode import PromptEncoder, StreamDecoder, decode, encode, split_chunks
from .errors import (
    ArtifactError,
    BadConfigError,
    BadCrcError,
    BadHeaderError,
    BadMagicError,
    BadOffsetError,
    BadTensorError,
    BadTokenizerError,
    QuantError,
    TruncatedArtifactError,
    UnknownCharacterError,
    UnsupportedPatternError,
    UnsupportedVersionError,
)
from .evaluate import evaluate_loss
from .format import (
    arena_buffers,
    arena_bytes,
    constants,
    required_tensors,
    slide_tile_positions,
)
from .heads import attend
from .layout import Header, Layout, ModelSpec, TensorEntry, plan_layout
from .quantize import dequantize_rows, quantize_checkpoint, quantize_rows, quantize_tensors
from .reference import (
    KVCache,
    Session,
    attention,
    block,
    embed,
    forward_sequence,
    gelu,
    layernorm,
    linear,
    logits,
    quantize_vector,
    weights_of,
)
from .rng import PCG_STREAM, Pcg32
from .sampling import generate, sample
from .synthetic import synthetic_artifact, synthetic_tables, synthetic_weights
from .tables import TokenizerTables

__all__ = [
    "BUDGETS",
    "PCG_STREAM",
    "Artifact",
    "ArtifactError",
    "BadConfigError",
    "BadCrcError",
    "BadHeaderError",
    "BadMagicError",
    "BadOffsetError",
    "BadTensorError",
    "BadTokenizerError",
    "Budget",
    "Corruption",
    "Header",
    "KVCache",
    "Layout",
    "MemoryPlan",
    "ModelSpec",
    "Pcg32",
    "PromptEncoder",
    "QuantError",
    "Session",
    "StreamDecoder",
    "TensorEntry",
    "TokenizerTables",
    "TruncatedArtifactError",
    "UnknownCharacterError",
    "UnsupportedPatternError",
    "UnsupportedVersionError",
    "arena_buffers",
    "arena_bytes",
    "artifact_bytes",
    "attend",
    "attention",
    "block",
    "check_fits",
    "constants",
    "corrupted_artifacts",
    "decode",
    "dequantize_rows",
    "embed",
    "encode",
    "evaluate_loss",
    "feed_read_bytes",
    "fmath",  # exp, tanh and the sequential sum of FORMAT.md section 7
    "forward_sequence",
    "gelu",
    "generate",
    "layernorm",
    "linear",
    "logits",
    "memory_plan",
    "plan_layout",
    "quantize_checkpoint",
    "quantize_rows",
    "quantize_tensors",
    "quantize_vector",
    "read_artifact",
    "required_tensors",
    "sample",
    "slide_tile_positions",
    "split_chunks",
    "synthetic_artifact",
    "synthetic_tables",
    "synthetic_weights",
    "weights_of",
    "write_artifact",
]
