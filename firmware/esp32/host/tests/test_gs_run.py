"""gs-run, the host CLI: text equal to the reference's, JSON output, the empty prompt (bos_token),
errors in one line that name the status and the fix, sampling defaults equal to
gptstack.tools.defaults.SAMPLING, --stats (speed and weight bytes per token), --screen."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from gs_testlib import assert_same_tokens, run_gs

from gptstack.quant import PromptEncoder, decode, feed_read_bytes, generate
from gptstack.tools.defaults import SAMPLING


def test_text_is_the_engines(release_build, engine, bpe_artifact):
    """stdout is the prompt, then exactly the bytes of the tokens the engine samples (checked
    against the same engine through ctypes; the engine against the reference:
    test_engine_reference.py)."""
    art = bpe_artifact.art
    prompt = "ROMEO:\nWhat"
    ids = PromptEncoder(art.tables).encode(prompt)
    tokens = engine.open(bpe_artifact.data).generate(ids, 30, 0.8, 40, seed=5)
    out = subprocess.run(
        [
            release_build.gs_run,
            bpe_artifact.path,
            "--prompt",
            prompt,
            "--tokens",
            "30",
            "--temperature",
            "0.8",
            "--top-k",
            "40",
            "--seed",
            "5",
        ],
        capture_output=True,
        check=True,
    ).stdout  # bytes: may be invalid UTF-8
    assert out == prompt.encode() + decode(art.tables, tokens) + b"\n"


def test_json_output(release_build, bpe_artifact):
    art = bpe_artifact.art
    out = json.loads(
        run_gs(
            release_build.gs_run,
            bpe_artifact.path,
            "--prompt",
            "To be",
            "--tokens",
            20,
            "--greedy",
            "--json",
        ).stdout
    )
    prompt = PromptEncoder(art.tables).encode("To be")
    assert out["prompt_ids"] == prompt
    assert_same_tokens(out["tokens"], generate(art, prompt, 20, 0.0), "gs-run --json")
    pieces = [bytes.fromhex(p) for p in out["pieces_hex"]]
    assert len(pieces) == 21 and b"".join(pieces) == decode(art.tables, out["tokens"])
    assert out["text"] == b"".join(pieces).decode("utf-8", "replace")
    assert out["arena_bytes"] == art.header.arena_bytes and out["status"] == "GS_OK"


def test_empty_prompt_starts_from_bos(release_build, bpe_artifact, char_artifact):
    out = json.loads(
        run_gs(
            release_build.gs_run, bpe_artifact.path, "--tokens", 10, "--seed", 2, "--json"
        ).stdout
    )
    bos = bpe_artifact.art.spec.bos_token
    assert out["prompt_ids"] == [bos]
    want = generate(bpe_artifact.art, [], 10, SAMPLING.temperature, SAMPLING.top_k, seed=2)
    assert_same_tokens(out["tokens"], want, "empty prompt, default temperature and top-k")
    proc = run_gs(release_build.gs_run, char_artifact.path, "--tokens", 5, check=False)
    assert proc.returncode == 2 and "no bos_token" in proc.stderr and "--prompt" in proc.stderr


def test_encode_only(release_build, char_artifact):
    out = run_gs(release_build.gs_run, char_artifact.path, "--prompt", "ROMEO:", "--encode-only")
    assert out.stdout.split() == [str(i) for i in char_artifact.tokenizer.encode("ROMEO:")]


def test_prompt_file_with_any_bytes(release_build, utf8_artifact, tmp_path):
    prompt = tmp_path / "prompt.bin"
    prompt.write_bytes(b"caf\xc3\xa9 \xff\x00 end")
    out = json.loads(
        run_gs(
            release_build.gs_run,
            utf8_artifact.path,
            "--prompt-file",
            prompt,
            "--encode-only",
            "--json",
        ).stdout
    )
    assert out["prompt_ids"] == PromptEncoder(utf8_artifact.tables).encode(prompt.read_bytes())


@pytest.mark.parametrize(
    "args, words",
    [
        ([], ["MODEL.gsm"]),
        (["--tokens", "many"], ["--tokens", "many"]),
        (["--seed", "-1"], ["--seed"]),
        (["--frobnicate"], ["--frobnicate"]),
        (["--prompt", "a", "--ids", "1"], ["one of --prompt"]),
        (["--ids", "1,x"], ["--ids"]),
        (["--temperature", "-1"], ["--temperature -1", ">= 0"]),
        (["--temperature", "inf"], ["--temperature inf"]),
    ],
)
def test_bad_arguments_give_one_line(release_build, bpe_artifact, args, words):
    model = [] if not args else [bpe_artifact.path]
    proc = run_gs(release_build.gs_run, *model, *args, check=False)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert all(w in proc.stderr for w in words) and "gs-run --help" in proc.stderr


def test_sampling_defaults_are_the_projects(release_build, bpe_artifact):
    """The usage states SAMPLING's values, and a run without options samples with them."""
    usage = run_gs(release_build.gs_run, "--help").stdout
    defaults = dict(re.findall(r"--(seed|temperature|top-k) .*\(default ([0-9.]+)\)", usage))
    assert defaults == {
        "seed": str(SAMPLING.seed),
        "temperature": str(SAMPLING.temperature),
        "top-k": str(SAMPLING.top_k),
    }
    out = json.loads(
        run_gs(
            release_build.gs_run, bpe_artifact.path, "--prompt", "To be", "--tokens", 24, "--json"
        ).stdout
    )
    prompt = PromptEncoder(bpe_artifact.tables).encode("To be")
    assert_same_tokens(
        out["tokens"],
        generate(
            bpe_artifact.art, prompt, 24, SAMPLING.temperature, SAMPLING.top_k, seed=SAMPLING.seed
        ),
        "defaults",
    )


def test_artifact_errors_name_status_and_fix(release_build, bpe_artifact, char_artifact, tmp_path):
    damaged = tmp_path / "damaged.gsm"
    data = bytearray(bpe_artifact.data)
    data[len(data) // 2] ^= 1
    damaged.write_bytes(bytes(data))
    proc = run_gs(release_build.gs_run, damaged, check=False)
    assert proc.returncode == 2 and "GS_ERR_CRC" in proc.stderr and "copy it again" in proc.stderr
    proc = run_gs(release_build.gs_run, tmp_path / "missing.gsm", check=False)
    assert proc.returncode == 2 and "cannot read" in proc.stderr
    proc = run_gs(release_build.gs_run, char_artifact.path, "--prompt", "Ω?", check=False)
    assert proc.returncode == 2 and "GS_ERR_UNKNOWN_CHAR" in proc.stderr
    proc = run_gs(release_build.gs_run, bpe_artifact.path, "--ids", "99999", check=False)
    assert proc.returncode == 2 and "GS_ERR_TOKEN" in proc.stderr


def test_stats_report_speed_and_weight_bytes(release_build, bpe_artifact):
    """--stats: the speed line, and the artifact bytes read per generated token, which equal the
    memory plan's count over the run's feeds (three window slides in 50 tokens at T = 16)."""
    spec = bpe_artifact.art.spec
    n_prompt = len(PromptEncoder(bpe_artifact.tables).encode("ROMEO:"))
    proc = run_gs(
        release_build.gs_run,
        bpe_artifact.path,
        "--prompt",
        "ROMEO:",
        "--tokens",
        50,
        "--stats",
        "--quiet",
    )
    assert proc.stdout == "" and "tokens/s" in proc.stderr and "generated 50 tokens" in proc.stderr
    per_token = int(
        re.search(r"^gs-run: weight bytes per token: (\d+)$", proc.stderr, re.MULTILINE)[1]
    )
    pos, total = 0, 0
    for i in range(n_prompt + 49):  # the last generated token is not fed
        total += feed_read_bytes(spec, pos) if i >= n_prompt else 0
        pos = spec.block_size // 2 + 1 if pos == spec.block_size else pos + 1
    assert abs(per_token - total / 50) <= 0.5
    out = json.loads(
        run_gs(
            release_build.gs_run, bpe_artifact.path, "--prompt", "ROMEO:", "--tokens", 50, "--json"
        ).stdout
    )
    assert out["gen_weight_bytes"] == total and out["weight_bytes_per_token"] == per_token


def test_screen_png(release_build, bpe_artifact, tmp_path):
    if "GS_HAVE_OLED:INTERNAL=ON" not in (release_build.build_dir / "CMakeCache.txt").read_text():
        pytest.skip("this build has no OLED library (firmware/esp32/lib/oled, host/sim)")
    png = tmp_path / "screen.png"
    run_gs(
        release_build.gs_run,
        bpe_artifact.path,
        "--prompt",
        "ROMEO:",
        "--tokens",
        40,
        "--seed",
        1,
        "--screen",
        png,
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_readme_screen_is_what_the_engine_draws(release_build, trained_artifact, tmp_path):
    """docs/screen.png is `gs-run --screen` of the trained artifact as README.md says: prompt
    "ROMEO:", 60 tokens, the sampling defaults, byte for byte."""
    if "GS_HAVE_OLED:INTERNAL=ON" not in (release_build.build_dir / "CMakeCache.txt").read_text():
        pytest.skip("this build has no OLED library (firmware/esp32/lib/oled, host/sim)")
    docs_png = Path(__file__).resolve().parents[2] / "docs" / "screen.png"
    png = tmp_path / "screen.png"
    run_gs(
        release_build.gs_run,
        trained_artifact.path,
        "--prompt",
        "ROMEO:",
        "--tokens",
        60,
        "--screen",
        png,
        "--quiet",
    )
    assert png.read_bytes() == docs_png.read_bytes()
    assert (
        '--prompt "ROMEO:" --tokens 60 --screen' in (docs_png.parents[1] / "README.md").read_text()
    )
