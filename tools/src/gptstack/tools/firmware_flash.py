"""Write a model artifact into the board's `model` flash partition with esptool, without
rebuilding the firmware: what `gptstack firmware flash-model` runs.

    cmd = flash_model_command(Path("model.gsm"), port="/dev/ttyUSB0")   # checks, then the command
    subprocess.run(cmd, check=True)

The partition's offset and size come from firmware/esp32/partitions.csv (the one place they are
written; `gptstack.quant.budget` sizes exports for the same partition, and a firmware test checks
the two agree). Before anything is written the artifact must load (every check of FORMAT.md
section 6), fit the esp32s3 memory plan (RAM arena and flash budget) and fit the partition.
esptool's `--chip esp32s3` then refuses any other chip on the port.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .errors import GptstackError

MODEL_PARTITION = "model"
CHIP = "esp32s3"
# The board's esptool speed: what platformio.ini's upload_speed says (a firmware test checks it).
UPLOAD_BAUD = 460800


def parse_size(text: str) -> int:
    """A partition-table number: decimal, 0x hex, or with a K/M suffix (ESP-IDF gen_esp32part)."""
    text = text.strip()
    for suffix, factor in (("k", 1024), ("m", 1024 * 1024)):
        if text.lower().endswith(suffix):
            return parse_size(text[:-1]) * factor
    return int(text, 0)


def partition_rows(csv_text: str) -> list[dict[str, str]]:
    """The rows of a partition CSV as dicts (comments and blank lines skipped)."""
    rows = []
    for line in csv_text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",")] + [""] * 6
        rows.append(dict(zip(("name", "type", "subtype", "offset", "size", "flags"), fields)))
    return rows


def model_partition(csv_path: Path) -> tuple[int, int]:
    """(offset, size) of the `model` partition in csv_path; GptstackError if it has none."""
    for row in partition_rows(csv_path.read_text(encoding="utf-8")):
        if row["name"] == MODEL_PARTITION:
            if not row["offset"]:
                raise GptstackError(
                    f"{csv_path}: the '{MODEL_PARTITION}' row needs an explicit "
                    "offset (esptool writes the artifact there)"
                )
            return parse_size(row["offset"]), parse_size(row["size"])
    raise GptstackError(
        f"{csv_path} has no '{MODEL_PARTITION}' partition: the firmware maps the "
        "artifact from the partition of that name"
    )


def check_artifact(artifact: Path, partition_size: int) -> int:
    """The artifact's size after checking it loads, fits the esp32s3 plan and the partition.

    Raises the quant package's ArtifactError / QuantError (one line each) or GptstackError."""
    from gptstack.quant import check_fits, memory_plan, read_artifact

    if not artifact.is_file():
        raise GptstackError(
            f"artifact {artifact} not found: write one with `gptstack export "
            f"--ckpt RUN --target {CHIP} -o {artifact}`"
        )
    art = read_artifact(artifact)
    check_fits(memory_plan(art, CHIP))
    size = art.header.file_bytes
    if size > partition_size:
        raise GptstackError(
            f"artifact {artifact} is {size:,} bytes but the '{MODEL_PARTITION}' "
            f"partition holds {partition_size:,}: export a smaller model, or grow "
            "the partition in partitions.csv and gptstack.quant.budget together"
        )
    return size


def flash_model_command(
    artifact: Path, *, port: str, baud: int = UPLOAD_BAUD, partitions: Path
) -> list[str]:
    """The esptool command that writes `artifact` at the model partition's offset, after the
    checks of check_artifact."""
    offset, size = model_partition(partitions)
    check_artifact(artifact, size)
    return [
        sys.executable,
        "-m",
        "esptool",
        "--chip",
        CHIP,
        "--port",
        port,
        "--baud",
        str(baud),
        "write-flash",
        hex(offset),
        str(artifact),
    ]
