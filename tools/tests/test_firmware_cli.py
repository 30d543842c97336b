"""`gptstack firmware`: run's options are checked before gs-run starts (one line each, as
`gptstack sample` checks them), flash-model checks the artifact and prints the esptool command it
runs (the dry run), and the firmware sources are found from the current directory or
$GPTSTACK_FIRMWARE_DIR with an error naming that setting when they are not."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gptstack.quant import ModelSpec, synthetic_artifact, synthetic_tables
from gptstack.tools import firmware_cli, firmware_flash, firmware_host
from gptstack.tools.cli import main

CHECKOUT_FIRMWARE = Path(__file__).resolve().parents[2] / "firmware" / "esp32"
ESP32 = {
    "vocab_size": 512,
    "block_size": 64,
    "n_layer": 6,
    "n_head": 8,
    "n_embd": 256,
    "bias": True,
}


@pytest.fixture(scope="module")
def small_artifact(tmp_path_factory) -> Path:
    """A small valid artifact (fits every budget)."""
    tables = synthetic_tables("bpe", 300, seed=1)
    path = tmp_path_factory.mktemp("gsm") / "small.gsm"
    path.write_bytes(synthetic_artifact(ModelSpec(300, 16, 1, 2, 16, bias=True), tables, seed=1))
    return path


@pytest.fixture
def no_build(monkeypatch):
    """Fail the test if anything tries to build or start gs-run."""

    def refuse(*args, **kwargs):
        raise AssertionError("gs-run was built or started")

    monkeypatch.setattr(firmware_host, "build_host", refuse)


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--temperature", "-1", "--temperature is -1.0: it must be a number >= 0"),
        ("--temperature", "nan", "--temperature is nan"),
        ("--tokens", "0", "--tokens is 0: it must be 1 .."),
        ("--tokens", "1000001", "--tokens is 1000001"),
        ("--seed", "-3", "--seed is -3: it must be 0 .. 2^64-1"),
        ("--top-k", "-1", "--top-k is -1: it must be >= 0"),
    ],
)
def test_run_options_are_checked_before_gs_run(
    option, value, words, small_artifact, no_build, capsys
):
    code = main(["firmware", "run", "--artifact", str(small_artifact), option, value])
    err = capsys.readouterr().err
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert "usage" not in err


def test_run_defaults_are_the_sampling_defaults():
    from gptstack.tools.cli import build_parser
    from gptstack.tools.defaults import SAMPLING

    args = build_parser().parse_args(["firmware", "run", "--artifact", "x.gsm"])
    assert (args.temperature, args.top_k, args.seed) == (
        SAMPLING.temperature,
        SAMPLING.top_k,
        SAMPLING.seed,
    )


def test_gs_run_failure_is_one_line(small_artifact, tmp_path, capsys):
    """An artifact gs-run rejects: gs-run's own one-line reason, once, from gptstack."""
    damaged = tmp_path / "damaged.gsm"
    data = bytearray(small_artifact.read_bytes())
    data[len(data) // 2] ^= 1
    damaged.write_bytes(bytes(data))
    code = main(["firmware", "run", "--artifact", str(damaged), "--tokens", "3"])
    err = capsys.readouterr().err
    assert code == 2 and "GS_ERR_CRC" in err and len(err.strip().splitlines()) == 1, err


def test_flash_model_dry_run_prints_the_esptool_command(small_artifact, capsys):
    code = main(
        [
            "firmware",
            "flash-model",
            "--port",
            "/dev/ttyUSB7",
            "--artifact",
            str(small_artifact),
            "--dry-run",
        ]
    )
    assert code == 0
    cmd = shlex.split(capsys.readouterr().out.strip())
    offset, _ = firmware_flash.model_partition(CHECKOUT_FIRMWARE / "partitions.csv")
    assert cmd[1:3] == ["-m", "esptool"]
    assert cmd[3:] == [
        "--chip",
        "esp32s3",
        "--port",
        "/dev/ttyUSB7",
        "--baud",
        "460800",
        "write-flash",
        hex(offset),
        str(small_artifact),
    ]
    # esptool itself accepts every argument: with an explicit --help after them it prints the
    # write-flash usage instead of connecting (a bad option would be a usage error, status 2)
    help_run = subprocess.run(
        [sys.executable, *cmd[1:-2], "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert help_run.returncode == 0 and "write-flash" in help_run.stdout, help_run.stderr


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p.write_bytes(b"GSMF" + bytes(200)), "format version 0"),  # the reader's error
        (lambda p: None, "not found"),
    ],
)
def test_flash_model_refuses_what_cannot_work(make, words, tmp_path, capsys):
    artifact = tmp_path / "bad.gsm"
    make(artifact)
    code = main(
        ["firmware", "flash-model", "--port", "/dev/null", "--artifact", str(artifact), "--dry-run"]
    )
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and capsys.readouterr().out == ""
    assert words in err, err


def test_flash_model_checks_the_esp32s3_plan_and_the_partition(tmp_path, capsys):
    tables = synthetic_tables("bpe", 512, seed=2)
    too_long = tmp_path / "context.gsm"  # block_size 128: the KV cache outgrows the S3's RAM
    too_long.write_bytes(synthetic_artifact(ModelSpec(**{**ESP32, "block_size": 128}), tables))
    code = main(
        ["firmware", "flash-model", "--port", "p", "--artifact", str(too_long), "--dry-run"]
    )
    assert code == 2 and "esp32s3" in capsys.readouterr().err
    small = tmp_path / "small.gsm"
    small.write_bytes(
        synthetic_artifact(
            ModelSpec(300, 16, 1, 2, 16, bias=True), synthetic_tables("bpe", 300, seed=1)
        )
    )
    csv = tmp_path / "partitions.csv"
    csv.write_text("app0, app, ota_0, 0x10000, 1M\nmodel, data, 0x40, 0x110000, 4K\n")
    with pytest.raises(firmware_cli.GptstackError, match="partition holds 4,096"):
        firmware_flash.flash_model_command(small, port="p", partitions=csv)
    csv.write_text("app0, app, ota_0, 0x10000, 1M\n")
    with pytest.raises(firmware_cli.GptstackError, match="no 'model' partition"):
        firmware_flash.flash_model_command(small, port="p", partitions=csv)


@pytest.mark.parametrize(
    "text, value", [("0x600000", 0x600000), ("6M", 0x600000), ("64K", 65536), ("4096", 4096)]
)
def test_partition_sizes_parse_like_gen_esp32part(text, value):
    assert firmware_flash.parse_size(text) == value


def test_firmware_dir_from_the_checkout_or_the_setting(tmp_path, monkeypatch):
    monkeypatch.delenv(firmware_host.FIRMWARE_DIR_ENV, raising=False)
    monkeypatch.chdir(CHECKOUT_FIRMWARE / "host")  # anywhere inside a checkout
    assert firmware_host.firmware_dir() == CHECKOUT_FIRMWARE
    monkeypatch.chdir(tmp_path)  # outside any checkout, as an installed gptstack runs
    with pytest.raises(firmware_cli.GptstackError) as e:
        firmware_host.firmware_dir()
    assert "GPTSTACK_FIRMWARE_DIR" in str(e.value) and len(str(e.value).splitlines()) == 1
    monkeypatch.setenv(firmware_host.FIRMWARE_DIR_ENV, str(CHECKOUT_FIRMWARE))
    assert firmware_host.firmware_dir() == CHECKOUT_FIRMWARE
    monkeypatch.setenv(firmware_host.FIRMWARE_DIR_ENV, str(tmp_path))
    with pytest.raises(
        firmware_cli.GptstackError, match=f"GPTSTACK_FIRMWARE_DIR={tmp_path} has no"
    ):
        firmware_host.firmware_dir()
