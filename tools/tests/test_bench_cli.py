"""`gptstack bench ...` (tools/bench_cli.py) and benchmarks/gpu_suites.sh: wiring, not numbers."""

import shutil
import subprocess

import pytest

cli = pytest.importorskip("gptstack.tools.cli", reason="gptstack-tools is not installed")


def test_preset_shapes_follow_the_toml_files():
    from gptstack.tools.bench_cli import GPT2_VOCAB, preset_shape
    from gptstack.tools.config import load_preset

    cfg = load_preset("gpt2-124m")
    gpt2 = preset_shape("gpt2-124m")
    m, pad = cfg.model, cfg.tokenizer.pad_vocab_to
    assert (gpt2.n_layer, gpt2.n_head, gpt2.n_embd, gpt2.block_size) == (
        m.n_layer, m.n_head, m.n_embd, m.block_size)
    assert (gpt2.batch_size, gpt2.dropout, gpt2.bias) == (cfg.train.batch_size, m.dropout, m.bias)
    assert cfg.tokenizer.kind == "gpt2" and pad > 1  # the padding below is exercised
    assert gpt2.vocab_size % pad == 0 and GPT2_VOCAB <= gpt2.vocab_size < GPT2_VOCAB + pad
    assert preset_shape("esp32", batch_size=3).batch_size == 3


def test_user_mistakes_give_one_line_and_status_2(tmp_path, capsys):
    code = cli.main(["bench", "tokenizer", "--data", str(tmp_path / "none.txt"),
                     "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "none.txt" in err and len(err.strip().splitlines()) == 1
    code = cli.main(["bench", "report", "--results", str(tmp_path / "nothing")])
    assert code == 2


@pytest.mark.slow
def test_report_and_summary_commands(tmp_path, results_dir, suite_results, capsys):
    readme = tmp_path / "README.md"
    assert cli.main(["bench", "report", "--results", str(results_dir), "--readme", str(readme),
                     "--plots", str(tmp_path / "plots")]) == 0
    assert readme.is_file()
    files = [str(p) for p in suite_results.values()]
    assert cli.main(["bench", "summary", "--short", *files]) == 0
    assert "train" in capsys.readouterr().out


def test_gpu_script_parses(repo):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    script = repo / "benchmarks" / "gpu_suites.sh"
    assert subprocess.run([bash, "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "export PYTHONPATH=$ROOT/packages/tokenizer/src" in text
    assert "-m gptstack.tools.cli bench" in text
