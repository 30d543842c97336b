"""`gptstack firmware ...`: build the C engine for this host and run it on an artifact.

    gptstack firmware build [--variant release|asan|m32|openmp]
    gptstack firmware run --artifact model.gsm --prompt "ROMEO:" --tokens 100 [--screen out.png]

The ESP32-S3 image itself is built by PlatformIO (`pio run -d firmware/esp32 -t upload`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from .defaults import SAMPLING
from .errors import GptstackError


def add_firmware_parser(sub) -> None:
    fw = sub.add_parser("firmware", help="build and run the C engine on this host (simulator, OLED PNG)")
    fsub = fw.add_subparsers(dest="firmware_command", metavar="ACTION", required=True)
    p = fsub.add_parser("build", help="CMake-build the host engine, gs-run and the OLED simulator")
    p.add_argument("--variant", default="release", choices=["release", "asan", "m32", "openmp"])
    p.set_defaults(func=cmd_firmware_build)
    p = fsub.add_parser("run", help="generate with the C engine (gs-run) from an artifact")
    p.add_argument("--artifact", type=Path, required=True, help="the .gsm file")
    p.add_argument("--prompt", default="")
    p.add_argument("--tokens", type=int, default=100)
    p.add_argument("--seed", type=int, default=SAMPLING.seed)
    p.add_argument("--temperature", type=float, default=SAMPLING.temperature)
    p.add_argument("--top-k", type=int, default=SAMPLING.top_k)
    p.add_argument("--screen", type=Path, help="also render the final OLED screen to this PNG")
    p.add_argument("--variant", default="release", choices=["release", "openmp"])
    p.set_defaults(func=cmd_firmware_run)


def cmd_firmware_build(args: argparse.Namespace) -> int:
    from .firmware_host import build_host

    build = build_host(args.variant)
    print(f"built {args.variant}: {build.gs_run}")
    return 0


def run_engine(artifact: Path, prompt: str, *, tokens: int, seed: int, temperature: float,
               top_k: int, screen: Path | None = None, variant: str = "release",
               capture: bool = False) -> subprocess.CompletedProcess:
    """Run gs-run on an artifact (building it first if needed)."""
    from .firmware_host import build_host

    if not Path(artifact).is_file():
        raise GptstackError(
            f"artifact {artifact} not found: write one with `gptstack export --ckpt RUN -o {artifact}`"
        )
    build = build_host(variant)
    cmd = [str(build.gs_run), str(artifact), "--prompt", prompt, "--tokens", str(tokens),
           "--seed", str(seed), "--temperature", str(temperature), "--top-k", str(top_k)]
    if screen is not None:
        Path(screen).parent.mkdir(parents=True, exist_ok=True)
        cmd += ["--screen", str(screen)]
    proc = subprocess.run(cmd, text=True, capture_output=capture)
    if proc.returncode != 0:
        detail = (proc.stderr or "").strip().splitlines()[-1:] if capture else []
        raise GptstackError(f"gs-run failed with status {proc.returncode} {' '.join(detail)}".strip())
    return proc


def cmd_firmware_run(args: argparse.Namespace) -> int:
    run_engine(args.artifact, args.prompt, tokens=args.tokens, seed=args.seed,
               temperature=args.temperature, top_k=args.top_k, screen=args.screen,
               variant=args.variant)
    if args.screen:
        print(f"\nscreen -> {args.screen}", file=sys.stderr)
    return 0
