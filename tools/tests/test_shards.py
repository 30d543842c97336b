"""The .bin token shard codec (llm.c / modded-nanogpt format), shard folders, training on them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import regex
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gptstack.tokenizer import PATTERNS, CharTokenizer, gpt2_tokenizer, train_bpe
from gptstack.tools.checkpoint import load_checkpoint
from gptstack.tools.cli import main
from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.data import prepare_corpus
from gptstack.tools.errors import DataError
from gptstack.tools.shard_corpus import load_shard_corpus, text_pieces, write_shards
from gptstack.tools.shards import (
    HEADER_BYTES,
    MAGIC,
    VERSION,
    ShardStream,
    read_shard,
    write_shard,
)
from gptstack.tools.train import train

tokens_st = st.lists(st.integers(0, 65535), max_size=600).map(lambda v: np.array(v, np.uint16))
FILES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FILES
@given(tokens=tokens_st)
def test_a_shard_round_trips(tmp_path, tokens):
    path = write_shard(tmp_path / "a.bin", tokens)
    assert path.stat().st_size == HEADER_BYTES + 2 * len(tokens)
    header = np.fromfile(path, dtype="<i4", count=3)
    assert header.tolist() == [MAGIC, VERSION, len(tokens)]
    back = read_shard(path)
    assert back.dtype == np.uint16 and np.array_equal(back, tokens)


@FILES
@given(tokens=tokens_st, position=st.integers(0, HEADER_BYTES - 1), value=st.integers(0, 255))
def test_any_change_to_the_header_is_detected(tmp_path, tokens, position, value):
    path = write_shard(tmp_path / "h.bin", tokens)
    raw = bytearray(path.read_bytes())
    if raw[position] == value:
        value ^= 0xFF
    raw[position] = value
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=f"shard {path}: "):
        read_shard(path)


@FILES
@given(tokens=tokens_st, data=st.data())
def test_a_cut_or_extended_file_is_detected(tmp_path, tokens, data):
    path = write_shard(tmp_path / "c.bin", tokens)
    raw = path.read_bytes()
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        raw += bytes(data.draw(st.integers(1, 9)))
    path.write_bytes(raw)
    with pytest.raises(DataError, match="short file|count mismatch"):
        read_shard(path)


@pytest.mark.parametrize(
    "problem,words",
    [
        ({0: 12345}, "bad magic 12345"),
        ({1: 2}, "version 2"),
        ({2: 11}, "count mismatch, the header says 11 tokens"),
        ({77: 5}, "header word 77 is 5"),
    ],
)
def test_each_header_check_says_what_failed(tmp_path, problem, words):
    path = write_shard(tmp_path / "x.bin", np.arange(10, dtype=np.uint16))
    header = np.fromfile(path, dtype="<i4", count=256)
    for word, value in problem.items():
        header[word] = value
    path.write_bytes(header.tobytes() + path.read_bytes()[HEADER_BYTES:])
    with pytest.raises(DataError, match=words):
        read_shard(path)


def _stream(tmp_path, sizes, seed=0):
    rng = np.random.default_rng(seed)
    parts = [rng.integers(0, 65536, n).astype(np.uint16) for n in sizes]
    paths = [write_shard(tmp_path / f"s_train_{i:06d}.bin", p) for i, p in enumerate(parts)]
    return ShardStream(paths), parts


@FILES
@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=5), data=st.data())
def test_a_stream_indexes_like_the_concatenated_shards(tmp_path, sizes, data):
    stream, parts = _stream(tmp_path, sizes)
    whole = np.concatenate(parts)
    idx = np.array(data.draw(st.lists(st.integers(0, len(whole) - 1), min_size=1, max_size=30)))
    assert np.array_equal(stream[idx.reshape(-1, 1)], whole[idx.reshape(-1, 1)])
    lo = data.draw(st.integers(0, len(whole)))
    hi = data.draw(st.integers(lo, len(whole)))
    assert np.array_equal(stream[lo:hi], whole[lo:hi])
    with pytest.raises(IndexError):
        stream[np.array([len(whole)])]


@FILES
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=5),
    B=st.integers(1, 3),
    T=st.integers(1, 8),
)
def test_training_blocks_read_each_shard_in_order_once_per_epoch(tmp_path, sizes, B, T):
    stream, parts = _stream(tmp_path, sizes)
    # reference: whole B*T+1 blocks of each shard in turn, none across a shard's end
    blocks = [
        p[j * B * T : (j + 1) * B * T + 1] for p in parts for j in range((len(p) - 1) // (B * T))
    ]
    if not blocks:
        with pytest.raises(DataError, match="B x T"):
            stream.block(0, B, T)
        return
    for k in range(2 * len(blocks)):  # the second epoch repeats the first
        x, y = stream.block(k, B, T)
        want = blocks[k % len(blocks)].astype(np.int64)
        assert np.array_equal(x.reshape(-1), want[:-1]) and np.array_equal(y.reshape(-1), want[1:])


@pytest.mark.parametrize("world_size,grad_accum", [(2, 2), (2, 4), (3, 3)])
def test_ranks_read_disjoint_blocks(tmp_path, world_size, grad_accum):
    from gptstack.tools.distributed import World

    stream, _ = _stream(tmp_path, [400, 250, 333])
    epoch = int(stream.blocks_per_shard(2, 4).sum())
    read = {}
    for r in range(world_size):
        for step in range(epoch // grad_accum):
            for micro in World(rank=r, size=world_size).micro_batches(grad_accum):
                x, _ = stream.block(step * grad_accum + micro, 2, 4)
                read.setdefault(r, []).append(x.tobytes())
    everything = [b for blocks in read.values() for b in blocks]
    assert len(set(everything)) == len(everything)  # no block read twice, by any two ranks


TEXT = st.text(alphabet="ab Z9é.,'s\n\t\r ", max_size=80)


@settings(max_examples=300, deadline=None)
@given(text=TEXT, size=st.integers(1, 12))
@example(text="\n\n9", size=1)  # GPT-2: "\n", "\n", "9" whole; "\n\n" alone is one token
@example(text="a\n  9 b", size=2)  # a cut before the spaces would split "\n " differently
def test_pieces_encode_as_the_whole_text(text, size, bpe_tokenizers):
    pieces = list(text_pieces(text, size))
    assert "".join(pieces) == text
    for pattern in PATTERNS.values():  # no pre-token crosses a cut or changes at one
        assert [t for p in pieces for t in regex.findall(pattern, p)] == regex.findall(
            pattern, text
        )
    for tok in [CharTokenizer.from_text(text + "x"), *bpe_tokenizers]:
        assert [i for p in pieces for i in tok.encode(p)] == tok.encode(text)


@pytest.fixture(scope="module")
def bpe_tokenizers(shakespeare_text):
    sample = shakespeare_text[:20_000]
    return [
        gpt2_tokenizer(),
        train_bpe(sample, 300, pattern="gpt4"),
        train_bpe(sample, 300, pattern="gpt2"),
    ]


@pytest.fixture
def shard_dir(tmp_path, small_corpus):
    """small_corpus as shards of at most 20,000 characters (tokens) each, via the CLI."""
    out = tmp_path / "shards"
    assert (
        main(
            [
                "data",
                "shard",
                "--data",
                str(small_corpus),
                "--tokenizer",
                "char",
                "-o",
                str(out),
                "--shard-tokens",
                "20000",
            ]
        )
        == 0
    )
    return out


def test_data_shard_writes_the_tokens_of_the_text_path(shard_dir, small_corpus, capsys):
    meta = json.loads((shard_dir / "shards.json").read_text())
    assert len(meta["train"]["files"]) == 3 and len(meta["val"]["files"]) == 1
    cfg = apply_overrides(load_preset("smoke"), [f"data.path={small_corpus}"])
    text_path = prepare_corpus(cfg)
    sharded = load_shard_corpus(apply_overrides(load_preset("smoke"), [f"data.path={shard_dir}"]))
    assert sharded.tokenizer.fingerprint() == text_path.tokenizer.fingerprint()
    assert np.array_equal(sharded.train[:], text_path.train)
    assert np.array_equal(sharded.val[:], text_path.val)
    assert sharded.bits_per_char(1.0) == pytest.approx(text_path.bits_per_char(1.0))
    capsys.readouterr()
    # a second run into the same folder would mix old and new shards: refused in one line
    assert (
        main(
            [
                "data",
                "shard",
                "--data",
                str(small_corpus),
                "--tokenizer",
                "char",
                "-o",
                str(shard_dir),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "already holds .bin shards" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_training_on_shards_learns_and_its_checkpoint_evaluates(tmp_path, shard_dir, one_thread):
    cfg = apply_overrides(
        load_preset("smoke"),
        [
            f"data.path={shard_dir}",
            "train.max_steps=12",
            "train.log_interval=1",
            "train.eval_interval=6",
        ],
    )
    result = train(cfg, tmp_path / "run", progress=False, log=lambda s: None)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    loss = {r["step"]: r["loss"] for r in records if r["event"] == "train"}
    assert result.step == 12 and loss[12] < loss[1]
    assert load_checkpoint(tmp_path / "run").meta["data"]["name"] == "shards"
    assert main(["eval", "--ckpt", str(tmp_path / "run"), "--samples", "0"]) == 0


def test_a_damaged_shard_stops_training_with_one_line(shard_dir, tmp_path, capsys):
    bad = shard_dir / "small_train_000001.bin"
    bad.write_bytes(bad.read_bytes()[:-3])
    assert (
        main(
            ["train", "--preset", "smoke", "--data", str(shard_dir), "--out", str(tmp_path / "run")]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"shard {bad}: count mismatch" in err and len(err.strip().splitlines()) == 1


def test_shards_from_elsewhere_need_gpt2_tokens(tmp_path):
    folder = tmp_path / "fineweb"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for name in ("fineweb_train_000001.bin", "fineweb_val_000000.bin"):
        write_shard(folder / name, rng.integers(0, 50257, 5000).astype(np.uint16))
    char = apply_overrides(load_preset("smoke"), [f"data.path={folder}"])
    with pytest.raises(DataError, match="no tokenizer.json"):
        load_shard_corpus(char)
    gpt2 = apply_overrides(load_preset("smoke"), [f"data.path={folder}", "tokenizer.kind=gpt2"])
    corpus = load_shard_corpus(gpt2)
    assert len(corpus.train) == 5000 and np.isnan(corpus.bits_per_char(1.0))
    write_shard(folder / "fineweb_train_000002.bin", np.array([1, 2, 60000] * 20, np.uint16))
    with pytest.raises(DataError, match="token id 60000 is outside"):
        load_shard_corpus(gpt2)


def test_write_shards_refuses_a_vocabulary_beyond_uint16(tmp_path):
    class Wide(CharTokenizer):
        vocab_size = 70_000

    with pytest.raises(DataError, match="uint16"):
        write_shards("abc\n" * 10, "x.txt", Wide.from_text("abc\n"), tmp_path / "o")
