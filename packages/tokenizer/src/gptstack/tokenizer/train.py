"""Byte-level BPE trainer: learns merges from text, incrementally.

    tok = train_bpe(open("tinyshakespeare.txt").read(), 512, pattern="gpt2")

Algorithm (each step is the textbook BPE step; only the bookkeeping is incremental):
1. Cut the text at special tokens, split the rest with the pattern regex once, and count each
   distinct piece ("chunk"); each chunk becomes a list of byte ids 0..255.
2. Count every adjacent pair once, weighted by chunk counts, and index pair → chunks holding it.
3. Repeatedly take the best pair from a heap, merge it into a new id in the chunks that hold it,
   and re-count pairs in those chunks only.

Tie-break (documented, deterministic): the pair with the highest count wins; among equal counts,
the smallest (left_id, right_id). A pair whose joined bytes equal an existing token's bytes is
never merged (tiktoken needs unique token bytes): it is dropped and the next pair taken. With
left-to-right merging this guard never fires in practice: a span whose ends stayed token boundaries
is split exactly as its bytes alone would be, so bytes equal to token t were already merged into t
at t's step and cannot still be two tokens. The check stays so the guarantee does not rest on that.
Training stops early, with a smaller vocabulary, when no pair is left to merge.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from itertools import pairwise

import regex

from .base import check_special_names
from .bpe import N_BYTE_TOKENS, BPETokenizer
from .errors import TokenizerError
from .patterns import pattern_regex

Pair = tuple[int, int]


def train_bpe(
    text: str,
    vocab_size: int,
    *,
    pattern: str = "gpt2",
    special_tokens: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> BPETokenizer:
    """Learn a byte-level BPE tokenizer of `vocab_size` ids from `text`.

    Args:
        text: training text. Occurrences of `special_tokens` in it are cut out before counting,
            so no merge spans or learns from a special token's text.
        vocab_size: total ids: 256 bytes + merges + special tokens.
        pattern: pre-tokenization pattern, "gpt2" or "gpt4".
        special_tokens: strings that get the last ids, in order.
        progress: called as progress(merges_done, merges_wanted) after each merge.

    Returns:
        The tokenizer. Its vocab_size is smaller than asked when the text runs out of pairs.

    Raises:
        TokenizerError: vocab_size below 256 + len(special_tokens), unknown pattern, bad special
            tokens, or a lone surrogate in `text`.
    """
    specials = check_special_names(special_tokens)
    regex_str = pattern_regex(pattern)
    if not isinstance(vocab_size, int) or vocab_size < N_BYTE_TOKENS + len(specials):
        raise TokenizerError(
            f"vocab_size {vocab_size!r} is too small: byte-level BPE needs at least "
            f"{N_BYTE_TOKENS} byte tokens + {len(specials)} special tokens; ask for "
            f">= {N_BYTE_TOKENS + len(specials)}"
        )
    surrogate = regex.search(r"[\ud800-\udfff]", text)
    if surrogate is not None:
        raise TokenizerError(
            f"training text has a lone surrogate {surrogate.group()!r} at position "
            f"{surrogate.start()}, which has no UTF-8 form: read the text with "
            "errors='replace' (or fix the source file)"
        )
    n_merges = vocab_size - N_BYTE_TOKENS - len(specials)
    chunk_counts = count_chunks(text, regex_str, specials)
    merges = learn_merges(chunk_counts, n_merges, progress)
    return BPETokenizer(merges, pattern, specials)


def count_chunks(text: str, regex_str: str, specials: Sequence[str] = ()) -> Counter[str]:
    """Pre-tokenize `text` (minus special-token occurrences) and count each distinct piece."""
    splitter = regex.compile(regex_str)
    if not specials:
        return Counter(splitter.findall(text))
    # Longest special first, so a special token containing another one is cut whole.
    cut = regex.compile("|".join(regex.escape(s) for s in sorted(specials, key=len, reverse=True)))
    counts: Counter[str] = Counter()
    for part in cut.split(text):
        counts.update(splitter.findall(part))
    return counts


def learn_merges(
    chunk_counts: Counter[str],
    n_merges: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[Pair]:
    """Learn up to `n_merges` merges from distinct chunks with their counts (see module doc)."""
    words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]
    freqs = list(chunk_counts.values())
    token_bytes = [bytes([b]) for b in range(N_BYTE_TOKENS)]
    known_bytes = set(token_bytes)

    # pair → weighted count, and pair → chunks that may hold it (a superset: entries are never
    # removed, a chunk that lost the pair is skipped when visited).
    counts: dict[Pair, int] = {}
    where: defaultdict[Pair, set[int]] = defaultdict(set)
    for i, (word, freq) in enumerate(zip(words, freqs, strict=True)):
        for pair in pairwise(word):
            counts[pair] = counts.get(pair, 0) + freq
            where[pair].add(i)

    # Max-heap by count, then smallest (left, right): entries are (-count, left, right). Lazy:
    # an entry may be stale; every live pair has at least one entry with stored count >= its
    # current count, so the first entry popped whose count is current is the true best pair.
    heap = [(-count, left, right) for (left, right), count in counts.items()]
    heapq.heapify(heap)

    merges: list[Pair] = []
    while len(merges) < n_merges and heap:
        neg_count, left, right = heapq.heappop(heap)
        pair = (left, right)
        count = counts.get(pair, 0)
        if count != -neg_count:
            if 0 < count < -neg_count:  # count went down since this entry: re-queue it
                heapq.heappush(heap, (-count, left, right))
            continue  # (count went up: a newer entry with the higher count is queued)
        joined = token_bytes[left] + token_bytes[right]
        if joined in known_bytes:  # known_bytes only grows: this pair is skipped for good
            continue
        new_id = N_BYTE_TOKENS + len(merges)
        merges.append(pair)
        token_bytes.append(joined)
        known_bytes.add(joined)
        for new_pair in _apply_merge(words, freqs, where.pop(pair), pair, new_id, counts, where):
            heapq.heappush(heap, (-counts[new_pair], new_pair[0], new_pair[1]))
        if progress is not None:
            progress(len(merges), n_merges)
    return merges


def _apply_merge(
    words: list[list[int]],
    freqs: list[int],
    chunk_ids: set[int],
    pair: Pair,
    new_id: int,
    counts: dict[Pair, int],
    where: defaultdict[Pair, set[int]],
) -> set[Pair]:
    """Merge `pair` into `new_id` in the given chunks, updating pair counts and the index.

    Occurrences are merged left to right without overlap (as the reference does). Only the pairs
    around each merged occurrence change: (prev, left) becomes (prev, new_id) and (right, next)
    becomes (new_id, next). Pairs without `new_id` only lose counts; the returned pairs (those
    containing `new_id`) gained, so the caller queues them.
    """
    left, right = pair
    new_pairs: set[Pair] = set()
    for i in chunk_ids:
        word = words[i]
        if left not in word:
            continue  # stale index entry: the pair left this chunk in an earlier merge
        j = word.index(left)
        n = len(word)
        merged = word[:j]
        sites: list[int] = []  # positions of new_id in `merged`
        while j < n:
            token = word[j]
            if token == left and j + 1 < n and word[j + 1] == right:
                sites.append(len(merged))
                merged.append(new_id)
                j += 2
            else:
                merged.append(token)
                j += 1
        if not sites:
            continue  # stale, as above
        freq = freqs[i]
        last = len(merged) - 1
        for k in sites:
            counts[pair] -= freq
            if k > 0:
                prev = merged[k - 1]
                # the token before `left` in the old chunk (`right` if prev was merged too)
                counts[right if prev == new_id else prev, left] -= freq
                _add(counts, where, new_pairs, (prev, new_id), freq, i)
            if k < last and merged[k + 1] != new_id:  # (new_id, new_id) is counted once, above
                following = merged[k + 1]
                counts[right, following] -= freq
                _add(counts, where, new_pairs, (new_id, following), freq, i)
        words[i] = merged
    return new_pairs


def _add(
    counts: dict[Pair, int],
    where: defaultdict[Pair, set[int]],
    new_pairs: set[Pair],
    pair: Pair,
    freq: int,
    chunk: int,
) -> None:
    """Count one more occurrence (weight `freq`) of a new pair in `chunk`."""
    counts[pair] = counts.get(pair, 0) + freq
    new_pairs.add(pair)
    where[pair].add(chunk)
