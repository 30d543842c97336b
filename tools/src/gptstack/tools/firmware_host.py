"""Build the C engine for this host: the one way the tests, `gptstack firmware` and the benchmarks
get `gs-run` and `libgs_engine.so`.

    build = build_host("release")          # or "asan", "m32", "openmp", "fuzz"
    subprocess.run([build.gs_run, "model.gsm", "--prompt", "ROMEO:", "--tokens", "50"])
    ctypes.CDLL(build.engine_lib)

Configures `firmware/esp32/host/CMakeLists.txt` once per variant into `<build_root>/build-<variant>`
(default build_root: `firmware/esp32/host`, git-ignored), then runs `cmake --build`, which is a
no-op when nothing changed. The sources are found by `firmware_dir()`: `$GPTSTACK_FIRMWARE_DIR`,
else the checkout around the current directory. A file lock serializes concurrent builds of one
variant. A missing
tool (cmake, a C compiler, gcc-multilib for m32, the sanitizer or OpenMP runtime, clang's
libFuzzer) raises GptstackError naming the package to install.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

VARIANTS = ("release", "asan", "m32", "openmp", "fuzz")
_OLED_VARIANTS = ("release", "openmp")  # gs-run --screen (see host/CMakeLists.txt)

# What each variant needs beyond cmake and a C compiler: (compiler, probe flags, install hint).
_PROBES: dict[str, tuple[str | None, list[str], str]] = {
    "release": (None, [], "apt-get install gcc"),
    "asan": (
        None,
        ["-fsanitize=address,undefined"],
        "apt-get install gcc (it ships libasan and libubsan)",
    ),
    "m32": (None, ["-m32", "-msse2", "-mfpmath=sse"], "apt-get install gcc-multilib"),
    "openmp": (None, ["-fopenmp"], "apt-get install gcc (libgomp)"),
    "fuzz": (
        "clang",
        ["-fsanitize=fuzzer,address,undefined"],
        "apt-get install clang libclang-rt-14-dev (libFuzzer)",
    ),
}
_FUZZ_MAIN = (
    "#include <stdint.h>\n#include <stddef.h>\n"
    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n"
)


@dataclass(frozen=True)
class HostBuild:
    """One configured and built variant: its folder and the files the callers use."""

    variant: str
    build_dir: Path
    gs_run: Path  # the CLI
    engine_lib: Path  # libgs_engine.so (engine + ctypes accessors)

    def program(self, name: str) -> Path:
        """Another program of this build (gs-fuzz, gs-heapcheck, gs-fuzz-libfuzzer, gs-screen)."""
        return self.build_dir / name

    @property
    def engine_archive(self) -> Path:
        """libgs_engine.a: the engine objects alone (what the heap check inspects with nm)."""
        return self.build_dir / "libgs_engine.a"


def _error(message: str) -> Exception:
    from .errors import GptstackError  # imported late: it pulls in every package (torch)

    return GptstackError(message)


FIRMWARE_DIR_ENV = "GPTSTACK_FIRMWARE_DIR"


def firmware_dir() -> Path:
    """The firmware sources (a checkout's firmware/esp32 folder): $GPTSTACK_FIRMWARE_DIR when set,
    else firmware/esp32 in the current directory or the nearest parent that has one. An
    installed gptstack ships no C sources, so outside a checkout the variable names them.
    Raises GptstackError naming the setting when they are not there."""
    env = os.environ.get(FIRMWARE_DIR_ENV)
    if env:
        folder = Path(env).expanduser()
        if not (folder / "host" / "CMakeLists.txt").is_file():
            raise _error(
                f"{FIRMWARE_DIR_ENV}={env} has no host/CMakeLists.txt: point it at the "
                f"firmware/esp32 folder of a gptstack checkout"
            )
        return folder.resolve()
    for parent in [Path.cwd(), *Path.cwd().parents]:
        folder = parent / "firmware" / "esp32"
        if (folder / "host" / "CMakeLists.txt").is_file():
            return folder
    raise _error(
        f"the firmware sources (firmware/esp32) are not in {Path.cwd()} or above it: run "
        f"from a gptstack checkout or set {FIRMWARE_DIR_ENV} to its firmware/esp32 folder"
    )


def _which(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise _error(f"{tool} not found on PATH: the host firmware build needs it ({hint})")
    return path


@functools.cache
def _probe(compiler: str, flags: tuple[str, ...], fuzz: bool) -> str | None:
    """Compile and link a tiny program with these flags; the compiler's complaint, or None."""
    with tempfile.TemporaryDirectory(prefix="gs-probe-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(_FUZZ_MAIN if fuzz else "int main(void) { return 0; }\n")
        proc = subprocess.run(
            [compiler, *flags, str(src), "-o", str(Path(tmp) / "probe")],
            capture_output=True,
            text=True,
            check=False,
        )
        return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["?"])[-1]


def check_toolchain(variant: str) -> str:
    """The C compiler for this variant after checking it can build it; raises naming the fix."""
    if variant not in VARIANTS:
        raise _error(
            f"firmware host variant {variant!r} is unknown: use one of {', '.join(VARIANTS)}"
        )
    _which("cmake", "apt-get install cmake, or pip install cmake")
    wanted, flags, hint = _PROBES[variant]
    compiler = wanted or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise _error(f"no C compiler found (cc, gcc or $CC): {hint}")
    compiler = _which(compiler, hint)
    problem = _probe(compiler, tuple(flags), variant == "fuzz")
    if problem is not None:
        raise _error(
            f"the {variant} firmware build needs `{compiler} {' '.join(flags)}`, which "
            f"fails here ({problem}): {hint}"
        )
    return compiler


def _cache_values(build_dir: Path) -> dict[str, str]:
    """The entries of build_dir's CMakeCache.txt (`KEY:TYPE=VALUE` lines), empty before the first
    configure."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return {}
    values = {}
    for line in cache.read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and ":" in key and not line.startswith(("#", "//")):
            values[key.split(":", 1)[0]] = value
    return values


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise _error(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def _needs_configure(cache: dict[str, str], variant: str, source: Path) -> bool:
    if cache.get("GS_VARIANT") != variant:
        return True
    # the OLED library is picked up at configure time: reconfigure when it appears or goes
    oled = (source / "sim" / "oled.cmake").is_file() and variant in _OLED_VARIANTS
    return cache.get("GS_HAVE_OLED") != ("ON" if oled else "OFF")


def build_host(
    variant: str = "release",
    build_root: str | os.PathLike | None = None,
    *,
    jobs: int | None = None,
) -> HostBuild:
    """Configure (first time) and build one variant; returns where its outputs are.

    variant: release (-O2), asan (ASan + UBSan), m32 (32-bit, SSE float), openmp (-O3
    -march=native -fopenmp), fuzz (clang + libFuzzer harness). build_root: folder that holds
    build-<variant> (default firmware/esp32/host). Raises GptstackError for a missing tool or a
    failed build, with the compiler's last lines.
    """
    compiler = check_toolchain(variant)
    source = firmware_dir() / "host"
    root = Path(build_root) if build_root is not None else source
    build_dir = (root / f"build-{variant}").resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / ".gs-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per variant at a time (pytest -n, CLI)
        cache = _cache_values(build_dir)
        if _needs_configure(cache, variant, source):
            generator = cache.get("CMAKE_GENERATOR") or (
                "Ninja" if shutil.which("ninja") else "Unix Makefiles"
            )
            _run(
                [
                    "cmake",
                    "-S",
                    str(source),
                    "-B",
                    str(build_dir),
                    "-G",
                    generator,
                    f"-DGS_VARIANT={variant}",
                    f"-DCMAKE_C_COMPILER={compiler}",
                ],
                f"configuring the {variant} firmware host build",
            )
        _run(
            ["cmake", "--build", str(build_dir), "--parallel", str(jobs or os.cpu_count() or 2)],
            f"building the {variant} firmware host build",
        )
    return HostBuild(variant, build_dir, build_dir / "gs-run", build_dir / "libgs_engine.so")
