"""gptstack.tokenizer: text ↔ token ids for gptstack, three kinds behind one interface.

    from gptstack.tokenizer import CharTokenizer, train_bpe, gpt2_tokenizer, load_tokenizer

    tok = train_bpe(text, 512, pattern="gpt2")      # byte-level BPE learned from text
    ids = tok.encode("To be, or not to be")
    tok.save("tokenizer.json"); tok = load_tokenizer("tokenizer.json")

Kinds: "char" (`CharTokenizer`), "bpe" (`train_bpe` / `BPETokenizer`), "gpt2" (`gpt2_tokenizer`).
Encoding of bpe and gpt2 runs in tiktoken. The file format is described in `fileformat.py`.
"""

from .atomic import atomic_path, sync_dir, write_atomic
from .base import Tokenizer
from .bpe import BPETokenizer
from .char import CharTokenizer
from .errors import TokenizerError, TokenizerFileError, UnknownCharacterError
from .fileformat import FORMAT_NAME, FORMAT_VERSION
from .gpt2 import GPT2_RANKS, GPT2Tokenizer, gpt2_tokenizer
from .load import load_tokenizer, tokenizer_from_dict
from .paths import default_data_dir
from .patterns import PATTERNS
from .train import train_bpe

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "GPT2_RANKS",
    "PATTERNS",
    "BPETokenizer",
    "CharTokenizer",
    "GPT2Tokenizer",
    "Tokenizer",
    "TokenizerError",
    "TokenizerFileError",
    "UnknownCharacterError",
    "atomic_path",
    "default_data_dir",
    "gpt2_tokenizer",
    "load_tokenizer",
    "sync_dir",
    "tokenizer_from_dict",
    "train_bpe",
    "write_atomic",
]
