"""The PlatformIO project, checked offline: platformio.ini parses, lints clean and sets the keys
the build and README.md rely on, the partition table fits 8 MB (aligned, no overlap, a coredump
partition, a model partition that holds the committed artifact and agrees with
gptstack.quant.budget and with `gptstack firmware flash-model`), and the board's sampling
defaults in src/main.cpp are gptstack.tools.defaults.SAMPLING's.

(`pio run` itself needs the ESP32 platform and toolchain, which cannot be downloaded here.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gptstack.quant.budget import BUDGETS
from gptstack.tools import firmware_flash
from gptstack.tools.defaults import SAMPLING

PROJECT = Path(__file__).resolve().parents[2]  # firmware/esp32
FLASH_BYTES = 8 * 1024 * 1024  # ESP32-S3-DevKitC-1 N8: 8 MB flash
COMMITTED_ARTIFACT = PROJECT / "data" / "model.gsm"


@pytest.fixture(scope="module")
def config() -> dict[str, dict[str, object]]:
    """`pio project config --json-output`, with [env] merged into each env section."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "platformio",
            "project",
            "config",
            "-d",
            str(PROJECT),
            "--json-output",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    sections = {name: dict(items) for name, items in json.loads(done.stdout)}
    base = sections.get("env", {})
    return {
        name: {**base, **opts} if name.startswith("env:") else opts
        for name, opts in sections.items()
    }


def test_platformio_ini_lints_clean():
    done = subprocess.run(
        [sys.executable, "-m", "platformio", "project", "config", "-d", str(PROJECT), "--lint"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and "free from linting errors" in done.stdout, (
        done.stdout + done.stderr
    )


def test_esp32s3_environment(config):
    env = config["env:esp32s3"]
    assert config["platformio"]["default_envs"] == ["esp32s3"]
    assert "platform-espressif32" in env["platform"] or env["platform"].startswith("espressif32")
    assert env["board"] == "esp32-s3-devkitc-1"
    assert env["framework"] == ["arduino"]
    assert env["board_upload.flash_size"] == "8MB"
    assert int(env["board_upload.maximum_size"]) == FLASH_BYTES
    assert (PROJECT / env["board_build.partitions"]).is_file()
    assert env["board_build.flash_mode"] == "qio"  # PERFORMANCE.md's flash bandwidth assumes it
    assert int(env["upload_speed"]) == firmware_flash.UPLOAD_BAUD == 460800  # the board's own
    assert int(env["monitor_speed"]) == 115200  # src/main.cpp: Serial.begin(115200)
    assert env["monitor_echo"] is True  # pio parses "yes" as a boolean
    assert "extra_scripts" not in env  # the model is flashed by `gptstack firmware flash-model`
    assert env["build_unflags"] == ["-Os"] and "-O2" in env["build_flags"]
    flags = " ".join(env["build_flags"])
    for name in ("GS_OLED_SDA", "GS_OLED_SCL", "GS_OLED_ADDR"):
        assert f"-D{name}=" in flags


def test_board_sampling_defaults_are_the_projects(config):
    """src/main.cpp's GS_TEMPERATURE / GS_TOP_K equal SAMPLING's, and platformio.ini does not
    override them."""
    source = (PROJECT / "src" / "main.cpp").read_text()
    defines = dict(re.findall(r"^#define (GS_TEMPERATURE|GS_TOP_K) (\S+)$", source, re.MULTILINE))
    assert set(defines) == {"GS_TEMPERATURE", "GS_TOP_K"}
    assert float(defines["GS_TEMPERATURE"].rstrip("f")) == SAMPLING.temperature
    assert int(defines["GS_TOP_K"]) == SAMPLING.top_k
    flags = " ".join(config["env:esp32s3"]["build_flags"])
    assert "GS_TEMPERATURE" not in flags and "GS_TOP_K" not in flags


def test_native_test_environment(config):
    env = config["env:native"]
    assert env["platform"] == "native"
    assert env["test_framework"] == "unity"
    assert (PROJECT / "test" / "test_oled").is_dir()


def test_libraries_are_where_the_ldf_looks():
    for lib in ("engine", "oled"):
        assert any((PROJECT / "lib" / lib).glob("*.h")), f"lib/{lib} has no header"


def read_partitions() -> list[dict[str, object]]:
    """partitions.csv parsed here independently: name, type, subtype, offset, size."""
    rows = []
    for line in (PROJECT / "partitions.csv").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, kind, subtype, offset, size, *_ = [f.strip() for f in line.split(",")]
        rows.append(
            {
                "name": name,
                "type": kind,
                "subtype": subtype,
                "offset": int(offset, 0),
                "size": int(size, 0),
            }
        )
    return rows


def test_partitions_fit_8mb_without_overlap():
    rows = read_partitions()
    assert len({r["name"] for r in rows}) == len(rows)
    end_of_table = 0x8000 + 0x1000  # the partition table's own sector (ESP-IDF default offset)
    previous_end = end_of_table
    for r in sorted(rows, key=lambda r: r["offset"]):
        assert r["offset"] >= previous_end, f"{r['name']} overlaps the partition before it"
        assert r["offset"] % 0x1000 == 0 and r["size"] % 0x1000 == 0, f"{r['name']}: 4 KiB sectors"
        if r["type"] == "app":
            assert r["offset"] % 0x10000 == 0, f"{r['name']}: apps start on 64 KiB (MMU pages)"
        previous_end = r["offset"] + r["size"]
    assert previous_end <= FLASH_BYTES


def test_coredump_and_app_partitions():
    """A coredump partition (Arduino-ESP32 3.x writes core dumps to flash and complains at every
    boot without one; 64 KiB as in its default.csv) and one app slot that otadata selects."""
    rows = {r["name"]: r for r in read_partitions()}
    coredump = rows["coredump"]
    assert (coredump["type"], coredump["subtype"]) == ("data", "coredump")
    assert coredump["size"] >= 0x10000
    apps = [r for r in rows.values() if r["type"] == "app"]
    assert [a["subtype"] for a in apps] == ["ota_0"] and rows["otadata"]["subtype"] == "ota"
    assert apps[0]["size"] >= 0x180000  # 1.5 MiB: several times the sketch's expected size


def test_model_partition_matches_quant_budget_and_flash_model():
    model = {r["name"]: r for r in read_partitions()}["model"]
    assert (model["type"], int(model["subtype"], 0)) == ("data", 0x40)
    assert model["size"] == BUDGETS["esp32s3"].flash_bytes
    assert model["offset"] % 0x10000 == 0  # esp_partition_mmap maps whole 64 KiB MMU pages
    csv = PROJECT / "partitions.csv"
    assert firmware_flash.model_partition(csv) == (model["offset"], model["size"])


def test_model_partition_holds_the_committed_artifact():
    if not COMMITTED_ARTIFACT.is_file():
        pytest.skip(f"{COMMITTED_ARTIFACT} is not in this checkout")
    model = {r["name"]: r for r in read_partitions()}["model"]
    assert COMMITTED_ARTIFACT.stat().st_size <= model["size"]
    # and flash-model accepts it for this partition (it loads, fits esp32s3's plan)
    size = firmware_flash.check_artifact(COMMITTED_ARTIFACT, model["size"])
    assert size == COMMITTED_ARTIFACT.stat().st_size


# ---- the Wokwi project (not run here: README.md) ----------------------------------------------


def _flag_value(config, name: str) -> str:
    flags = " ".join(config["env:esp32s3"]["build_flags"])
    return re.search(rf"-D{name}=(\S+)", flags)[1]


def test_wokwi_diagram_wires_the_oled_as_the_firmware_expects(config):
    """diagram.json: an ESP32-S3-DevKitC-1 and an SSD1306 at platformio.ini's address, SDA and
    SCL on platformio.ini's pins, powered from 3V3, and the serial monitor on UART0."""
    diagram = json.loads((PROJECT / "diagram.json").read_text())
    parts = {p["id"]: p for p in diagram["parts"]}
    boards = [p for p in parts.values() if p["type"] == "board-esp32-s3-devkitc-1"]
    oleds = [p for p in parts.values() if p["type"] == "board-ssd1306"]
    assert len(boards) == 1 and len(oleds) == 1
    esp, oled = boards[0]["id"], oleds[0]["id"]
    assert int(oleds[0]["attrs"]["i2cAddress"], 16) == int(_flag_value(config, "GS_OLED_ADDR"), 16)
    wires = {frozenset(c[:2]) for c in diagram["connections"]}
    assert frozenset({f"{oled}:SDA", f"{esp}:{_flag_value(config, 'GS_OLED_SDA')}"}) in wires
    assert frozenset({f"{oled}:SCL", f"{esp}:{_flag_value(config, 'GS_OLED_SCL')}"}) in wires
    assert any(frozenset({f"{oled}:VCC", f"{esp}:{pin}"}) in wires for pin in ("3V3.1", "3V3.2"))
    assert any(f"{oled}:GND" in w and any(e.startswith(f"{esp}:GND") for e in w) for w in wires)
    assert frozenset({f"{esp}:TX", "$serialMonitor:RX"}) in wires


def test_wokwi_toml_points_at_the_platformio_outputs(config):
    import tomllib

    wokwi = tomllib.loads((PROJECT / "wokwi.toml").read_text())["wokwi"]
    env = config["platformio"]["default_envs"][0]
    assert wokwi["version"] == 1
    assert wokwi["firmware"] == f".pio/build/{env}/firmware.bin"
    assert wokwi["elf"] == f".pio/build/{env}/firmware.elf"
