"""PlatformIO pre-script: flash the model artifact into the `model` partition on upload.

`pio run -e esp32s3 -t upload` then writes bootloader, partition table, boot_app0, the firmware
and `data/model.gsm` in one esptool `write-flash` call. How: the espressif32 platform's builder
(builder/main.py) turns every `(offset, path)` pair of the SCons variable FLASH_EXTRA_IMAGES
into esptool arguments when it sets up the upload, and the Arduino framework script appends its
own images (bootloader, partitions.bin, boot_app0.bin) to the same list. A *pre* script runs
before both, so appending here is seen by the upload command; a post script would be too late.

The offset and size come from the `model` row of the partition table named by
`board_build.partitions`, so the CSV is the one place they are written. Options in platformio.ini:
    custom_model_image = data/model.gsm   artifact, relative to the project directory
    custom_flash_model = yes              no: upload the firmware only (faster when iterating)
The environment variable GS_FLASH_MODEL (yes/no), when set, overrides custom_flash_model:
    GS_FLASH_MODEL=no pio run -t upload   # firmware only; the model partition is left as it is
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MODEL_PARTITION = "model"
GSM_MAGIC = b"GSMF"  # packages/quant/FORMAT.md section 1
EXPORT_HINT = "gptstack export --ckpt DIR --target esp32s3 -o firmware/esp32/data/model.gsm"


class ModelImageError(Exception):
    """The artifact cannot go into the partition; the message says why and what to do."""


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
    """(offset, size) of the `model` partition in `csv_path`."""
    for row in partition_rows(csv_path.read_text(encoding="utf-8")):
        if row["name"] == MODEL_PARTITION:
            if not row["offset"]:
                raise ModelImageError(f"{csv_path}: the '{MODEL_PARTITION}' row needs an explicit offset")
            return parse_size(row["offset"]), parse_size(row["size"])
    raise ModelImageError(f"{csv_path} has no '{MODEL_PARTITION}' partition: the firmware maps it by that name")


def check_image(image: Path, partition_size: int) -> int:
    """Size of a plausible artifact that fits the partition, else ModelImageError."""
    size = image.stat().st_size
    with image.open("rb") as f:
        magic = f.read(len(GSM_MAGIC))
    if magic != GSM_MAGIC:
        raise ModelImageError(
            f"{image} starts with {magic!r}, not {GSM_MAGIC!r}: it is not a gptstack artifact; "
            f"make one with `{EXPORT_HINT}`"
        )
    if size > partition_size:
        raise ModelImageError(
            f"{image} is {size} bytes but the '{MODEL_PARTITION}' partition holds {partition_size}: "
            "export a smaller model (the export prints the flash budget) or grow the partition in "
            "partitions.csv and gptstack.quant.budget together"
        )
    return size


def truthy(value: object) -> bool:
    return str(value).strip().lower() in ("1", "yes", "true", "on")


def register(env, targets: list[str]) -> tuple[str, str] | None:
    """Append the artifact to env's FLASH_EXTRA_IMAGES; return the (offset, path) added, if any.

    Missing artifact: a warning when uploading, nothing added. Bad artifact: ModelImageError.
    """
    project_dir = Path(env.subst("$PROJECT_DIR"))
    flash = os.environ.get("GS_FLASH_MODEL") or env.GetProjectOption("custom_flash_model", "yes")
    if not truthy(flash):
        if "upload" in targets:
            print("flash_model: model flashing is off (GS_FLASH_MODEL / custom_flash_model): "
                  "uploading the firmware only")
        return None
    csv_path = project_dir / env.GetProjectOption("board_build.partitions", "partitions.csv")
    image = project_dir / env.GetProjectOption("custom_model_image", "data/model.gsm")
    offset, size = model_partition(csv_path)
    if not image.is_file():
        if "upload" in targets:
            print(
                f"flash_model: warning: no artifact at {image}; uploading the firmware only "
                f"(the device will say so on its screen). Make one with `{EXPORT_HINT}`.",
                file=sys.stderr,
            )
        return None
    nbytes = check_image(image, size)
    entry = (hex(offset), str(image))
    if entry not in env.get("FLASH_EXTRA_IMAGES", []):  # PlatformIO may run a script twice
        env.Append(FLASH_EXTRA_IMAGES=[entry])
    if "upload" in targets:
        print(f"flash_model: {image.name} ({nbytes} bytes) -> '{MODEL_PARTITION}' at {hex(offset)}")
    return entry


if "Import" in globals():  # run by SCons (PlatformIO); the tests load this file without it
    from SCons.Script import COMMAND_LINE_TARGETS

    Import("env")  # noqa: F821 - SCons builtin
    try:
        register(env, list(COMMAND_LINE_TARGETS))  # noqa: F821 - bound by Import
    except (ModelImageError, OSError, ValueError) as err:
        sys.stderr.write(f"flash_model: error: {err}\n")
        env.Exit(1)  # noqa: F821
