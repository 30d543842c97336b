"""gptstack.tools.firmware_host: the one way to build the host engine. Incremental, a missing
tool is an error that names what to install, and no build lets the compiler change float math."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from gs_testlib import host_build

from gptstack.tools import firmware_host


def test_build_is_incremental(release_build):
    cache = release_build.build_dir / "CMakeCache.txt"
    before = cache.stat().st_mtime_ns
    again = firmware_host.build_host("release")
    assert again == release_build
    assert cache.stat().st_mtime_ns == before  # not reconfigured
    for path in (
        again.gs_run,
        again.engine_lib,
        again.engine_archive,
        again.program("gs-fuzz"),
        again.program("gs-heapcheck"),
    ):
        assert path.is_file(), path


def test_unknown_variant_is_named():
    with pytest.raises(Exception) as e:
        firmware_host.build_host("turbo")
    assert type(e.value).__name__ == "GptstackError"
    assert "turbo" in str(e.value) and "release" in str(e.value)


def test_missing_cmake_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no cmake, no compiler
    with pytest.raises(Exception) as e:
        firmware_host.check_toolchain("release")
    assert "cmake not found" in str(e.value) and "apt-get install cmake" in str(e.value)


def test_missing_multilib_is_named(monkeypatch):
    monkeypatch.setattr(firmware_host, "_probe", lambda *a: "cannot find -lgcc")
    with pytest.raises(Exception) as e:
        firmware_host.check_toolchain("m32")
    assert "gcc-multilib" in str(e.value) and "-m32" in str(e.value)


@pytest.mark.slow
def test_separate_build_root(tmp_path):
    """build_root puts build-<variant> elsewhere (a benchmark's scratch folder, say)."""
    build = firmware_host.build_host("release", tmp_path)
    assert build.build_dir == (tmp_path / "build-release").resolve() and build.gs_run.is_file()


# Flags that let a compiler change float results: FORMAT.md section 7 pins every operation.
UNSAFE_FLOAT_FLAGS = (
    "-ffast-math",
    "-Ofast",
    "-funsafe-math-optimizations",
    "-fassociative-math",
    "-freciprocal-math",
    "-ffp-contract=fast",
    "-ffp-contract=on",
    "-fcx-limited-range",
)


def _unsafe(flags: list[str]) -> set[str]:
    return {f for f in flags if f in UNSAFE_FLOAT_FLAGS or f.startswith("-ffast-math")}


@pytest.mark.parametrize("variant", ["release", "asan", "m32", "openmp"])
def test_engine_float_flags(variant):
    """Every engine source of every host variant compiles with -ffp-contract=off and without
    -ffast-math or its parts (compile_commands.json of the build)."""
    build = host_build(variant)
    commands = json.loads((build.build_dir / "compile_commands.json").read_text())
    engine_dir = firmware_host.firmware_dir() / "lib" / "engine"
    engine = [c for c in commands if Path(c["file"]).parent == engine_dir]
    assert len({c["file"] for c in engine}) == len(list(engine_dir.glob("*.c")))
    for c in engine:
        flags = c["arguments"] if "arguments" in c else shlex.split(c["command"])
        assert "-ffp-contract=off" in flags, c["file"]
        assert not _unsafe(flags), (c["file"], _unsafe(flags))


def test_device_build_float_flags():
    """The chip's build (PlatformIO: library.json applies to the engine sources) and the Xtensa
    size check keep -ffp-contract=off and add nothing unsafe."""
    esp32 = firmware_host.firmware_dir()
    library = json.loads((esp32 / "lib" / "engine" / "library.json").read_text())
    assert "-ffp-contract=off" in library["build"]["flags"]
    assert not _unsafe(library["build"]["flags"])
    ini = (esp32 / "platformio.ini").read_text()
    assert not _unsafe(re.findall(r"-[\w=+-]+", ini))
    script = (esp32 / "host" / "scripts" / "xtensa_sizes.sh").read_text()
    assert "-ffp-contract=off" in script and not _unsafe(script.split())
