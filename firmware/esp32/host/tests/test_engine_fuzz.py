"""Fuzzing the loader: the deterministic mutation driver gs-fuzz under GCC's ASan + UBSan over
valid artifacts (a bounded run: any crash, sanitizer report or hang fails), and a short smoke run
of the coverage-guided libFuzzer harness (clang), which is meant for long runs:

    cmake ... -DGS_VARIANT=fuzz (or build_host("fuzz")), then
    firmware/esp32/host/build-fuzz/gs-fuzz-libfuzzer CORPUS_DIR -max_total_time=3600
"""

from __future__ import annotations

import shutil

import pytest
from gs_testlib import host_build, run_gs

# Steps of FORMAT.md section 6 the driver's mutations must reach (statuses it must see): the
# envelope checks and the deep ones behind the CRC. GS_OK: some mutants still load and run.
MUST_SEE = {
    "GS_OK",
    "GS_ERR_TRUNCATED",
    "GS_ERR_HEADER",
    "GS_ERR_CRC",
    "GS_ERR_OFFSET",
    "GS_ERR_TOKENIZER",
    "GS_ERR_TENSOR",
}


@pytest.mark.slow
def test_mutation_fuzz_under_sanitizers(bpe_artifact, char_artifact, utf8_artifact):
    build = host_build("asan")
    seeds = [a.path for a in (bpe_artifact, char_artifact, utf8_artifact)]
    proc = run_gs(
        build.program("gs-fuzz"), "--iterations", 3000, "--seed", 20240601, *seeds, timeout=120
    )
    lines = proc.stdout.splitlines()
    assert lines[-1] == "gs-fuzz: ok" and lines[0] == "gs-fuzz: 3000 iterations"
    seen = {line.split()[0] for line in lines[1:-1]}
    assert MUST_SEE <= seen, f"statuses never reached: {MUST_SEE - seen}"


@pytest.mark.slow
def test_libfuzzer_harness_smoke(utf8_artifact, char_artifact, tmp_path):
    build = host_build("fuzz")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for a in (utf8_artifact, char_artifact):
        shutil.copy(a.path, corpus / a.path.name)
    proc = run_gs(
        build.program("gs-fuzz-libfuzzer"),
        corpus,
        "-runs=200",
        "-seed=1",
        "-max_len=65536",
        timeout=120,
    )
    assert "Done 200 runs" in proc.stderr
