import numpy as np
import pytest

from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.data import batch_rng, get_batch, prepare_corpus, split_text
from gptstack.tools.datasets import DATASETS, read_corpus, resolve_dataset
from gptstack.tools.errors import DataError


def test_named_dataset_resolves_offline_with_checksum(data_dir):
    path = resolve_dataset("tinyshakespeare", download=False)
    assert path.stat().st_size == DATASETS["tinyshakespeare"].nbytes


def test_missing_dataset_offline_says_where_to_put_it(tmp_path, monkeypatch):
    import urllib.error
    import urllib.request

    monkeypatch.setenv("GPTSTACK_DATA_DIR", str(tmp_path))

    def offline(*a, **k):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataError) as e:
        resolve_dataset("tinyshakespeare")
    msg = str(e.value)
    assert str(tmp_path) in msg and "tinyshakespeare.txt" in msg and "--data" in msg
    assert not list(tmp_path.iterdir())  # no partial file left behind


def test_wrong_checksum_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setenv("GPTSTACK_DATA_DIR", str(tmp_path))
    (tmp_path / "tinyshakespeare.txt").write_text("not shakespeare")
    with pytest.raises(DataError, match="SHA-256"):
        resolve_dataset("tinyshakespeare")


@pytest.mark.parametrize(
    "content, words", [(b"", "empty"), (b"   \n", "empty"), (b"\xff\xfe\xfa", "UTF-8")]
)
def test_bad_data_files(tmp_path, content, words):
    path = tmp_path / "d.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=words):
        read_corpus(path)
    with pytest.raises(DataError, match="does not exist"):
        read_corpus(tmp_path / "nope.txt")


def test_corpus_split_cache_and_batches(small_corpus):
    cfg = apply_overrides(load_preset("smoke"), [f"data.path={small_corpus}"])
    corpus = prepare_corpus(cfg)
    text = small_corpus.read_text()
    train_text, val_text = split_text(text, 0.1)
    assert corpus.tokenizer.decode(list(corpus.train)) == train_text
    assert corpus.tokenizer.decode(list(corpus.val)) == val_text
    again = prepare_corpus(cfg)  # from the memmap cache
    assert np.array_equal(again.train, corpus.train) and np.array_equal(again.val, corpus.val)
    x, y = get_batch(corpus.train, 4, 16, batch_rng(1, 5, 0))
    assert x.shape == y.shape == (4, 16) and x.dtype == np.int64
    assert np.array_equal(x[:, 1:], y[:, :-1])  # targets are the next tokens
    x2, _ = get_batch(corpus.train, 4, 16, batch_rng(1, 5, 0))
    x3, _ = get_batch(corpus.train, 4, 16, batch_rng(1, 6, 0))
    assert np.array_equal(x, x2) and not np.array_equal(x, x3)


def test_bpe_tokenizer_is_trained_on_the_train_split_only(small_corpus):
    cfg = apply_overrides(
        load_preset("esp32"), [f"data.path={small_corpus}", "tokenizer.vocab_size=300"]
    )
    corpus = prepare_corpus(cfg)
    assert corpus.tokenizer.kind == "bpe" and corpus.tokenizer.vocab_size == 300
    bpc = corpus.bits_per_char(np.log(2.0))  # 1 bit per token
    assert bpc == pytest.approx(len(corpus.val) / len(corpus.val_text))


def test_block_size_larger_than_the_data_is_a_clear_error(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("hello world, " * 20)
    cfg = apply_overrides(load_preset("smoke"), [f"data.path={path}", "model.block_size=512"])
    with pytest.raises(DataError, match="block_size"):
        prepare_corpus(cfg)
