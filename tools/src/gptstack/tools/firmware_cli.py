"""`gptstack firmware ...`: build the C engine for this host, run it on an artifact, and write an
artifact to a board.

    gptstack firmware build [--variant release|asan|m32|openmp]
    gptstack firmware run --artifact model.gsm --prompt "ROMEO:" --tokens 100 [--screen out.png]
    gptstack firmware flash-model --port /dev/ttyUSB0 --artifact model.gsm [--dry-run]

The ESP32-S3 firmware itself is built and uploaded by PlatformIO (`pio run -d firmware/esp32 -t
upload`); flash-model writes the model partition only, with esptool. The firmware sources are
found from the current directory or $GPTSTACK_FIRMWARE_DIR (firmware_host.firmware_dir).
"""

from __future__ import annotations

import argparse
import math
import shlex
import subprocess
import sys
from pathlib import Path

from .defaults import SAMPLING, add_sampling_arguments
from .errors import GptstackError

# gs-run's own limits (firmware/esp32/host/gs_run_args.c): checked here first, so a mistake is
# one line from gptstack, never gs-run's usage.
MAX_TOKENS = 1_000_000
MAX_SEED = 2**64 - 1
MAX_TOP_K = 2**32 - 1


def add_firmware_parser(sub) -> None:
    fw = sub.add_parser(
        "firmware",
        help="build and run the C engine on this host (simulator, "
        "OLED PNG), write a model to a board",
    )
    fsub = fw.add_subparsers(dest="firmware_command", metavar="ACTION", required=True)
    p = fsub.add_parser("build", help="CMake-build the host engine, gs-run and the OLED simulator")
    p.add_argument(
        "--variant",
        default="release",
        choices=["release", "asan", "m32", "openmp"],
        help="build flavour (default %(default)s)",
    )
    p.set_defaults(func=cmd_firmware_build)

    p = fsub.add_parser("run", help="generate with the C engine (gs-run) from an artifact")
    p.add_argument("--artifact", type=Path, required=True, help="the .gsm file")
    p.add_argument("--prompt", default="", help="text to continue (default: the BOS token)")
    p.add_argument(
        "--tokens",
        type=int,
        default=100,
        help=f"tokens to generate, 1 .. {MAX_TOKENS:,} (default %(default)s)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=SAMPLING.seed,
        help="PCG32 seed, 0 .. 2^64-1 (default %(default)s)",
    )
    add_sampling_arguments(p)
    p.add_argument("--screen", type=Path, help="also render the final OLED screen to this PNG")
    p.add_argument(
        "--stats", action="store_true", help="print tokens/s and the weight bytes read per token"
    )
    p.add_argument(
        "--variant",
        default="release",
        choices=["release", "openmp"],
        help="host build to run (default %(default)s)",
    )
    p.set_defaults(func=cmd_firmware_run)

    p = fsub.add_parser(
        "flash-model",
        help="write an artifact to the board's model partition "
        "(esptool), without rebuilding the firmware",
    )
    p.add_argument("--port", required=True, help="the board's serial port, e.g. /dev/ttyUSB0")
    p.add_argument("--artifact", type=Path, required=True, help="the .gsm file")
    p.add_argument(
        "--baud",
        type=int,
        default=None,
        help="esptool baud rate (default: platformio.ini's upload_speed, 460800)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check the artifact and print the esptool command without running it",
    )
    p.set_defaults(func=cmd_firmware_flash_model)


def cmd_firmware_build(args: argparse.Namespace) -> int:
    from .firmware_host import build_host

    build = build_host(args.variant)
    print(f"built {args.variant}: {build.gs_run}")
    return 0


def check_run_options(*, tokens: int, seed: int, temperature: float, top_k: int) -> None:
    """The sampling options `gptstack sample` accepts and gs-run can run; GptstackError (one
    line naming the option, the value and the range) otherwise."""
    if not 1 <= tokens <= MAX_TOKENS:
        raise GptstackError(f"--tokens is {tokens}: it must be 1 .. {MAX_TOKENS:,}")
    if not 0 <= seed <= MAX_SEED:
        raise GptstackError(f"--seed is {seed}: it must be 0 .. 2^64-1")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise GptstackError(
            f"--temperature is {temperature}: it must be a number >= 0 (0 = greedy)"
        )
    if not 0 <= top_k <= MAX_TOP_K:
        raise GptstackError(f"--top-k is {top_k}: it must be >= 0 (0 = no top-k)")


def run_engine(
    artifact: Path,
    prompt: str,
    *,
    tokens: int,
    seed: int,
    temperature: float,
    top_k: int,
    screen: Path | None = None,
    variant: str = "release",
    stats: bool = False,
    capture: bool = False,
) -> subprocess.CompletedProcess:
    """Run gs-run on an artifact (building it first if needed); the text goes to stdout (or is
    captured). Options are checked first; a failure of gs-run is one GptstackError line."""
    from .firmware_host import build_host

    check_run_options(tokens=tokens, seed=seed, temperature=temperature, top_k=top_k)
    if not Path(artifact).is_file():
        raise GptstackError(
            f"artifact {artifact} not found: write one with "
            f"`gptstack export --ckpt RUN -o {artifact}`"
        )
    build = build_host(variant)
    cmd = [
        str(build.gs_run),
        str(artifact),
        "--prompt",
        prompt,
        "--tokens",
        str(tokens),
        "--seed",
        str(seed),
        "--temperature",
        repr(float(temperature)),
        "--top-k",
        str(top_k),
    ]
    if stats:
        cmd.append("--stats")
    if screen is not None:
        Path(screen).parent.mkdir(parents=True, exist_ok=True)
        cmd += ["--screen", str(screen)]
    stdout = subprocess.PIPE if capture else None
    proc = subprocess.run(cmd, text=True, stdout=stdout, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exited with status {proc.returncode}"])[-1]
        raise GptstackError(last.removeprefix("gs-run: "))
    if not capture and proc.stderr:
        sys.stderr.write(proc.stderr)
    return proc


def cmd_firmware_run(args: argparse.Namespace) -> int:
    run_engine(
        args.artifact,
        args.prompt,
        tokens=args.tokens,
        seed=args.seed,
        temperature=args.temperature,
        top_k=args.top_k,
        screen=args.screen,
        variant=args.variant,
        stats=args.stats,
    )
    if args.screen:
        print(f"\nscreen -> {args.screen}", file=sys.stderr)
    return 0


def cmd_firmware_flash_model(args: argparse.Namespace) -> int:
    from .firmware_flash import UPLOAD_BAUD, flash_model_command
    from .firmware_host import firmware_dir

    baud = UPLOAD_BAUD if args.baud is None else args.baud
    if baud <= 0:
        raise GptstackError(f"--baud is {baud}: it must be a positive baud rate, e.g. 460800")
    cmd = flash_model_command(
        args.artifact, port=args.port, baud=baud, partitions=firmware_dir() / "partitions.csv"
    )
    print(shlex.join(cmd))
    if args.dry_run:
        return 0
    if subprocess.run(cmd, check=False).returncode != 0:
        raise GptstackError(
            f"esptool could not write {args.artifact} to {args.port}: see its "
            "output above (is the board on that port, and not held by a monitor?)"
        )
    return 0
