"""gptstack.tools.firmware_host: the one way to build the host engine. Incremental, and a missing
tool is an error that names what to install."""

from __future__ import annotations

import pytest

from gptstack.tools import firmware_host


def test_build_is_incremental(release_build):
    cache = release_build.build_dir / "CMakeCache.txt"
    before = cache.stat().st_mtime_ns
    again = firmware_host.build_host("release")
    assert again == release_build
    assert cache.stat().st_mtime_ns == before  # not reconfigured
    for path in (again.gs_run, again.engine_lib, again.engine_archive,
                 again.program("gs-fuzz"), again.program("gs-heapcheck")):
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
