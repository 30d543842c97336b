import subprocess
import sys

import pytest

from gptstack.tools.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gptstack.tools.cli", *args],
                          capture_output=True, text=True)


def test_help_lists_every_subcommand():
    out = run_cli("--help").stdout
    for cmd in ("pipeline", "tokenizer", "train", "sample", "eval", "plot", "quantize", "export",
                "bench", "firmware"):
        assert cmd in out


@pytest.mark.parametrize("args, words", [
    (["train", "--preset", "smoke", "--data", "/nonexistent/x.txt"], "does not exist"),
    (["train", "--preset", "nope"], "unknown preset"),
    (["train", "--preset", "smoke", "--set", "train.bogus=1"], "unknown key"),
    (["train"], "--preset"),
    (["sample", "--ckpt", "/nonexistent/run"], "does not exist"),
    (["plot", "/nonexistent/run"], "metrics.jsonl"),
])
def test_user_mistakes_give_one_line_and_status_2(args, words, capsys):
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2
    assert words in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_empty_data_file(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["train", "--preset", "smoke", "--data", str(empty), "--out", str(tmp_path / "r")]) == 2
    assert "empty" in capsys.readouterr().err


def test_tokenizer_train_encode_decode(tmp_path, small_corpus, capsys):
    out = tmp_path / "tok.json"
    assert main(["tokenizer", "train", "--data", str(small_corpus), "--vocab-size", "300", "-o", str(out)]) == 0
    report = capsys.readouterr().out
    assert "bytes/token" in report and out.is_file()
    assert main(["tokenizer", "encode", "--tokenizer", str(out), "To be, or not to be"]) == 0
    ids = capsys.readouterr().out.split()
    assert main(["tokenizer", "decode", "--tokenizer", str(out), *ids]) == 0
    assert capsys.readouterr().out == "To be, or not to be\n"
    assert main(["tokenizer", "decode", "--tokenizer", str(out), "99999"]) == 2
    assert "outside" in capsys.readouterr().err
