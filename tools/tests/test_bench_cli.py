"""`gptstack bench ...` (tools/bench_cli.py), the engine suite (it needs the C engine's host
build, which tools makes) and the GPU scripts: wiring, not numbers."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gptstack.bench import ModelShape, Settings, SuiteOptions, load_result, run_engine
from gptstack.tools import cli
from gptstack.tools.bench_cli import GPT2_VOCAB, preset_shape
from gptstack.tools.config import load_preset
from gptstack.tools.errors import GptstackError
from gptstack.tools.firmware_host import build_host

REPO = Path(__file__).resolve().parents[2]
FEW_ROUNDS = Settings(warmup=1, min_repeats=3, min_repeats_slow=2, max_repeats=3, budget_s=0.0)
ESP32 = ModelShape(
    "esp32",
    vocab_size=512,
    block_size=64,
    n_layer=6,
    n_head=8,
    n_embd=256,
    batch_size=64,
    dropout=0.2,
)


def test_preset_shapes_follow_the_toml_files():
    cfg = load_preset("gpt2-124m")
    gpt2 = preset_shape("gpt2-124m")
    m, pad = cfg.model, cfg.tokenizer.pad_vocab_to
    assert (gpt2.n_layer, gpt2.n_head, gpt2.n_embd, gpt2.block_size) == (
        m.n_layer,
        m.n_head,
        m.n_embd,
        m.block_size,
    )
    assert (gpt2.batch_size, gpt2.dropout, gpt2.bias) == (cfg.train.batch_size, m.dropout, m.bias)
    assert cfg.tokenizer.kind == "gpt2" and pad > 1  # the padding below is exercised
    assert gpt2.vocab_size % pad == 0 and GPT2_VOCAB <= gpt2.vocab_size < GPT2_VOCAB + pad
    assert preset_shape("esp32", batch_size=3).batch_size == 3


def test_user_mistakes_give_one_line_and_status_2(tmp_path, capsys):
    code = cli.main(
        ["bench", "tokenizer", "--data", str(tmp_path / "none.txt"), "--out", str(tmp_path)]
    )
    err = capsys.readouterr().err
    assert code == 2 and "none.txt" in err and len(err.strip().splitlines()) == 1
    code = cli.main(["bench", "report", "--results", str(tmp_path / "nothing")])
    assert code == 2


@pytest.mark.slow
def test_a_suite_then_report_and_summary_commands(tmp_path, capsys):
    results = tmp_path / "results"
    assert (
        cli.main(
            [
                "bench",
                "attention",
                "--device",
                "cpu",
                "--smoke",
                "--preset",
                "esp32",
                "--out",
                str(results),
                "--no-progress",
            ]
        )
        == 0
    )
    files = sorted(results.glob("attention-cpu-*.json"))
    assert len(files) == 1 and load_result(files[0])["suite"] == "attention"
    readme = tmp_path / "README.md"
    assert (
        cli.main(
            [
                "bench",
                "report",
                "--results",
                str(results),
                "--readme",
                str(readme),
                "--plots",
                str(tmp_path / "plots"),
            ]
        )
        == 0
    )
    assert files[0].name in readme.read_text()
    capsys.readouterr()
    assert cli.main(["bench", "summary", "--short", str(files[0])]) == 0
    assert "attention" in capsys.readouterr().out


def _gs_run() -> Path | None:
    try:
        return build_host("release").gs_run
    except GptstackError:
        if os.environ.get("GPTSTACK_REQUIRE_TOOLCHAINS"):
            raise
        return None


@pytest.mark.slow
def test_engine_suite_rows(tmp_path):
    binary = _gs_run()
    if binary is None:
        pytest.skip("the C engine could not be built here (cmake or a compiler missing)")
    out = tmp_path / "engine.json"
    run_engine(
        ESP32,
        engines={"release": binary},
        unavailable={"openmp": "not built here"},
        options=SuiteOptions(settings=FEW_ROUNDS, out=out, smoke=True, progress=False),
    )
    data = load_result(out)
    ok = [r for r in data["rows"] if r["section"] == "engine" and r["status"] == "ok"]
    assert {r["name"] for r in ok} >= {
        "C engine release (1 thread)",
        "PyTorch fp32 eager, KV cache (1 thread)",
    }
    c = next(r for r in ok if r["name"].startswith("C engine"))
    assert c["timing"] == "self" and c["ratios"]["vs_torch_1t"]["n"] == len(c["samples_s"])
    assert c["metrics"]["weight_bytes_per_token"] > 0  # gs-run's counter, recorded
    assert any(r["status"] == "skipped" and r["note"] == "not built here" for r in data["rows"])


GPU_SCRIPTS = sorted(
    [*(REPO / "benchmarks").glob("*.sh"), *(REPO / "packages/cuda_ops/scripts").glob("*.sh")]
)


@pytest.mark.parametrize("script", GPU_SCRIPTS, ids=lambda p: p.name)
def test_gpu_scripts_parse(script):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    assert subprocess.run([bash, "-n", str(script)]).returncode == 0


def test_a_prebuilt_cuda_ops_stamp_follows_its_sources_and_archs(tmp_path):
    """source_hash.sh names a build of cuda_ops (prebuild_for_device.sh stamps it, gpu_check.sh
    PREBUILT= compares): any edit of a source or another arch changes the line; bytecode and
    built extensions beside the sources do not."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    pkg = tmp_path / "cuda_ops"
    shutil.copytree(
        REPO / "packages/cuda_ops",
        pkg,
        ignore=shutil.ignore_patterns("build", "tests", "dev", "__pycache__", "*.so"),
    )

    def stamp(archs="sm_90a"):
        script = pkg / "scripts/source_hash.sh"
        out = subprocess.run([bash, str(script), archs], capture_output=True, text=True, check=True)
        return out.stdout.strip()

    first = stamp()
    assert first.startswith("sources ") and first.endswith(" archs sm_90a")
    assert stamp() == first
    cache = pkg / "src/gptstack/cuda_ops/__pycache__"
    cache.mkdir()
    (cache / "x.cpython-312.pyc").write_bytes(b"\0")
    (pkg / "src/gptstack/cuda_ops/_C.cpython-312-x86_64-linux-gnu.so").write_bytes(b"\0")
    assert stamp() == first
    assert stamp("sm_80") != first
    kernel = next((pkg / "csrc").glob("*.cu"))
    kernel.write_text(kernel.read_text() + "\n")
    assert stamp() != first


def test_a_distilled_presets_shape_carries_its_teachers():
    from gptstack.tools.bench_cli import preset_shape

    esp = preset_shape("esp32")
    assert esp.teacher is not None
    assert (esp.teacher.n_layer, esp.teacher.n_head, esp.teacher.n_embd) == (6, 6, 384)
    assert (esp.teacher.vocab_size, esp.teacher.block_size) == (esp.vocab_size, esp.block_size)
    assert preset_shape("shakespeare-char").teacher is None


def test_the_rungs_help_names_every_rung(capsys):
    from gptstack.bench import RUNG_KEYS
    from gptstack.tools.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "train", "--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps the help anywhere
    assert ",".join(RUNG_KEYS) in text


def test_the_cpu_train_ladder_runs_and_records_the_memory_setting_of_train(tmp_path, monkeypatch):
    """The CPU ladder runs with the malloc setting `gptstack train` uses there, and says which
    (here the one that leaves a user's own malloc tuning alone, so this process keeps its own)."""
    monkeypatch.setenv("MALLOC_TOP_PAD_", "0")
    args = ["bench", "train", "--device", "cpu", "--smoke", "--preset", "esp32"]
    assert cli.main([*args, "--rungs", "fp32", "--out", str(tmp_path), "--no-progress"]) == 0
    (path,) = tmp_path.glob("train-cpu-*.json")
    notes = load_result(path)["notes"]
    assert (
        "gptstack train's CPU memory setting: malloc as it is (MALLOC_TOP_PAD_ set in the "
        "environment)" in notes
    ), notes
