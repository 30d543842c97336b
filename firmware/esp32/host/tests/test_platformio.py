"""The PlatformIO project, checked offline: platformio.ini parses and says what README.md says,
the partition table fits 8 MB and agrees with gptstack.quant.budget, and the pre-script that
adds the model artifact to `pio run -t upload` does what it promises.

(`pio run` itself needs the ESP32 platform and toolchain, which cannot be downloaded here.)
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from gptstack.quant.budget import BUDGETS

PROJECT = Path(__file__).resolve().parents[2]  # firmware/esp32
FLASH_BYTES = 8 * 1024 * 1024                   # ESP32-S3-DevKitC-1 N8: 8 MB flash


def load_flash_model():
    spec = importlib.util.spec_from_file_location("flash_model", PROJECT / "scripts" / "flash_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


flash_model = load_flash_model()


@pytest.fixture(scope="module")
def config() -> dict[str, dict[str, object]]:
    """`pio project config --json-output`, with [env] merged into each env section."""
    done = subprocess.run(
        [sys.executable, "-m", "platformio", "project", "config", "-d", str(PROJECT), "--json-output"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    sections = {name: dict(items) for name, items in json.loads(done.stdout)}
    base = sections.get("env", {})
    return {name: {**base, **opts} if name.startswith("env:") else opts
            for name, opts in sections.items()}


def test_platformio_ini_lints_clean():
    done = subprocess.run(
        [sys.executable, "-m", "platformio", "project", "config", "-d", str(PROJECT), "--lint"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0 and "free from linting errors" in done.stdout, done.stdout + done.stderr


def test_esp32s3_environment(config):
    env = config["env:esp32s3"]
    assert config["platformio"]["default_envs"] == ["esp32s3"]
    assert "platform-espressif32" in env["platform"] or env["platform"].startswith("espressif32")
    assert env["board"] == "esp32-s3-devkitc-1"
    assert env["framework"] == ["arduino"]
    assert env["board_upload.flash_size"] == "8MB"
    assert int(env["board_upload.maximum_size"]) == FLASH_BYTES
    assert (PROJECT / env["board_build.partitions"]).is_file()
    assert env["extra_scripts"] == ["pre:scripts/flash_model.py"]  # pre: FLASH_EXTRA_IMAGES timing
    assert (PROJECT / "scripts" / "flash_model.py").is_file()
    assert env["custom_model_image"] == "data/model.gsm"
    flags = " ".join(env["build_flags"])
    for name in ("GS_OLED_SDA", "GS_OLED_SCL", "GS_OLED_ADDR"):
        assert f"-D{name}=" in flags


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
        rows.append({"name": name, "type": kind, "subtype": subtype,
                     "offset": int(offset, 0), "size": int(size, 0)})
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


def test_model_partition_matches_quant_budget():
    model = {r["name"]: r for r in read_partitions()}["model"]
    assert (model["type"], int(model["subtype"], 0)) == ("data", 0x40)
    assert (model["offset"], model["size"]) == (0x200000, 0x600000)
    assert model["size"] == BUDGETS["esp32s3"].flash_bytes
    assert model["offset"] % 0x10000 == 0  # esp_partition_mmap maps whole 64 KiB MMU pages
    assert flash_model.model_partition(PROJECT / "partitions.csv") == (model["offset"], model["size"])


# ---- scripts/flash_model.py with a stand-in for SCons's env -----------------------------------

class FakeEnv:
    def __init__(self, project_dir: Path, options: dict[str, str] | None = None):
        self.vars: dict[str, object] = {"FLASH_EXTRA_IMAGES": [("0x0", "bootloader.bin")]}
        self.project_dir, self.options = project_dir, options or {}

    def subst(self, text: str) -> str:
        assert text == "$PROJECT_DIR"
        return str(self.project_dir)

    def GetProjectOption(self, name: str, default: str) -> str:
        return self.options.get(name, default)

    def get(self, key, default=None):
        return self.vars.get(key, default)

    def Append(self, **kw):
        for key, value in kw.items():
            self.vars[key] = list(self.vars.get(key, [])) + list(value)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "partitions.csv").write_text(
        "# Name, Type, SubType, Offset, Size\napp0, app, ota_0, 0x10000, 1M\n"
        "model, data, 0x40, 0x180000, 64K\n"
    )
    return tmp_path


@pytest.fixture(autouse=True)
def _no_flash_override(monkeypatch):
    monkeypatch.delenv("GS_FLASH_MODEL", raising=False)


def test_flash_model_appends_the_artifact_once(project, capsys):
    image = project / "data" / "model.gsm"
    image.write_bytes(b"GSMF" + bytes(1000))
    env = FakeEnv(project)
    entry = flash_model.register(env, ["upload"])
    assert entry == ("0x180000", str(image))  # offset from the CSV, not a constant
    flash_model.register(env, ["upload"])     # PlatformIO may run the script twice
    assert env.vars["FLASH_EXTRA_IMAGES"] == [("0x0", "bootloader.bin"), entry]
    assert "1004 bytes" in capsys.readouterr().out


def test_flash_model_without_artifact_warns_and_adds_nothing(project, capsys):
    env = FakeEnv(project)
    assert flash_model.register(env, ["upload"]) is None
    assert env.vars["FLASH_EXTRA_IMAGES"] == [("0x0", "bootloader.bin")]
    assert "gptstack export" in capsys.readouterr().err


def test_flash_model_can_be_switched_off(project, monkeypatch):
    (project / "data" / "model.gsm").write_bytes(b"GSMF")
    monkeypatch.delenv("GS_FLASH_MODEL", raising=False)
    assert flash_model.register(FakeEnv(project, {"custom_flash_model": "no"}), ["upload"]) is None
    monkeypatch.setenv("GS_FLASH_MODEL", "no")  # the variable wins over platformio.ini
    assert flash_model.register(FakeEnv(project), ["upload"]) is None
    monkeypatch.setenv("GS_FLASH_MODEL", "yes")
    assert flash_model.register(FakeEnv(project, {"custom_flash_model": "no"}), ["upload"]) is not None


@pytest.mark.parametrize(
    "content, message",
    [(b"GSMF" + bytes(64 * 1024), "partition holds 65536"), (b"PK\x03\x04", "not a gptstack artifact")],
)
def test_flash_model_rejects_what_cannot_work(project, content, message):
    (project / "data" / "model.gsm").write_bytes(content)
    with pytest.raises(flash_model.ModelImageError, match=message):
        flash_model.register(FakeEnv(project), ["upload"])


def test_flash_model_needs_the_model_partition(project):
    (project / "partitions.csv").write_text("app0, app, ota_0, 0x10000, 1M\n")
    with pytest.raises(flash_model.ModelImageError, match="no 'model' partition"):
        flash_model.register(FakeEnv(project), [])


@pytest.mark.parametrize("text, value", [("0x600000", 0x600000), ("6M", 0x600000), ("64K", 65536), ("4096", 4096)])
def test_partition_sizes_parse_like_gen_esp32part(text, value):
    assert flash_model.parse_size(text) == value
