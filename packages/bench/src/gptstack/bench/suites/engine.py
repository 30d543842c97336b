"""Suite `engine`: how fast is the firmware's C engine on this host, next to PyTorch on the CPU?

    data = run_engine(shape_esp32, engines={"release": Path(".../build-release/gs-run")},
                      artifact=None, options=SuiteOptions(out=path))

Same model on both sides, batch 1, greedy: the int8 artifact runs in the C engine (`gs-run
--json`; the release build on one thread, the openmp build on one and on all threads), and its
weights, dequantized to float32 (q · scale per row: exactly the values the engine multiplies
by), run in PyTorch fp32 eager with the KV cache, on one thread and on every available one. The
artifact is the trained one when a path is given (firmware/esp32/data/model.gsm), else a
synthetic one of the shape's size from gptstack.quant.synthetic.

Work per sample: feed one prompt token (the artifact's BOS), then generate N tokens, N =
block_size - 1 so the window never slides (FORMAT.md section 8 re-feeds half the window when it
does; PyTorch's cache re-prefills instead, a different cost). That is N forwards and N samples on
both sides. The C engine reports its own time (prompt_s + gen_s: process start, mapping and
CRC check excluded; that wall time is recorded separately).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gptstack.model import GPT, GPTConfig, generate

from ..environment import threads_available
from ..errors import BenchError
from ..harness import Variant, compare
from ..results import Column, make_row, ratio_entries
from ..shapes import ModelShape
from .common import SuiteContext, SuiteOptions

BPE_MIN_VOCAB = 257  # 256 byte tokens + at least one special token
SUBPROCESS_TIMEOUT_S = 600


def _artifact(shape: ModelShape, artifact: str | os.PathLike | None, tmp: Path) -> tuple[Path, str]:
    """(path of the .gsm to run, where it came from)."""
    if artifact is not None:
        path = Path(artifact)
        if not path.is_file():
            raise BenchError(
                f"artifact {path} not found: write it with `gptstack export --ckpt "
                f"RUN -o {path}`, or leave --artifact out for a synthetic model"
            )
        return path, f"trained artifact {path}"
    try:
        from gptstack.quant import ModelSpec, synthetic_artifact, synthetic_tables
    except ImportError as e:
        raise BenchError(
            f"the engine suite needs gptstack-quant for a synthetic artifact ({e}): "
            f"install gptstack-bench[engine] or pass --artifact"
        ) from None
    kind = "bpe" if shape.vocab_size >= BPE_MIN_VOCAB else "char"
    tables = synthetic_tables(kind, shape.vocab_size, seed=0)
    spec = ModelSpec(
        shape.vocab_size,
        shape.block_size,
        shape.n_layer,
        shape.n_head,
        shape.n_embd,
        bias=shape.bias,
        bos_token=tables.special_ids[0],
    )
    path = tmp / f"synthetic-{shape.name}.gsm"
    path.write_bytes(synthetic_artifact(spec, tables, seed=0))
    return path, (
        f"synthetic artifact (gptstack.quant.synthetic_artifact, {kind} tables, "
        f"seed 0) of the {shape.name} shape"
    )


def _torch_model(path: Path) -> tuple[GPT, Any]:
    """The artifact's weights dequantized into a float32 GPT; returns (model, artifact)."""
    from gptstack.quant import read_artifact

    art = read_artifact(path)
    s = art.spec
    model = GPT(
        GPTConfig(
            vocab_size=s.vocab_size,
            block_size=s.block_size,
            n_layer=s.n_layer,
            n_head=s.n_head,
            n_embd=s.n_embd,
            bias=s.bias,
            dropout=0.0,
        )
    )
    state = {n: torch.from_numpy(np.ascontiguousarray(art.dequantized(n))) for n in art.names}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - set(GPT.tied_parameters):
        raise BenchError(
            f"artifact {path} does not match the model's tensors: missing "
            f"{missing}, unexpected {unexpected}"
        )
    return model.eval(), art


class EngineRun:
    """Calls gs-run once per sample; returns its self-reported seconds, keeps the rest."""

    def __init__(self, gs_run: Path, artifact: Path, bos: int, tokens: int, threads: int) -> None:
        self.cmd = [
            str(gs_run),
            str(artifact),
            "--ids",
            str(bos),
            "--tokens",
            str(tokens),
            "--greedy",
            "--json",
            "--quiet",
        ]
        self.env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        self.wall_s: list[float] = []
        self.tokens: list[int] = []
        self.weight_bytes_per_token: int | None = None  # the engine's own count (gs-run --json)

    def __call__(self, _: Any) -> float:
        t0 = time.perf_counter()
        proc = subprocess.run(
            self.cmd, capture_output=True, text=True, env=self.env, timeout=SUBPROCESS_TIMEOUT_S
        )
        self.wall_s.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise BenchError(
                f"{' '.join(self.cmd)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}"
            )
        out = json.loads(proc.stdout)
        self.tokens = out["tokens"]
        self.weight_bytes_per_token = out.get("weight_bytes_per_token")
        return out["prompt_s"] + out["gen_s"]


def _match(a: Sequence[int], b: Sequence[int]) -> float:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i / n
    return 1.0


def run_engine(
    shape: ModelShape,
    *,
    engines: Mapping[str, str | os.PathLike],
    unavailable: Mapping[str, str] | None = None,
    artifact: str | os.PathLike | None = None,
    tokens: int | None = None,
    options: SuiteOptions | None = None,
) -> dict[str, Any]:
    """C engine builds (variant name -> gs-run path; e.g. release, openmp) against PyTorch fp32
    on the CPU, batch 1. `unavailable` names builds that could not be made, with the reason."""
    options = options or SuiteOptions()
    shape = shape.smoke() if options.smoke else shape
    threads = threads_available()
    n_tok = tokens or (shape.block_size - 1)
    if not 1 <= n_tok <= shape.block_size - 1:
        raise BenchError(
            f"tokens is {n_tok}: it must be 1 .. block_size-1 = "
            f"{shape.block_size - 1} so the window does not slide"
        )
    params = {
        "shape": shape.to_dict(),
        "tokens": n_tok,
        "batch": 1,
        "sampling": "greedy",
        "threads_available": threads,
        "engines": {k: str(v) for k, v in engines.items()},
        "unavailable": dict(unavailable or {}),
    }
    ctx = SuiteContext.create("engine", params, options.on_cpu())
    _declare(ctx)
    torch_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="gs-bench-engine-") as tmp:
        path, source = _artifact(shape, artifact, Path(tmp))
        ctx.result.data["params"]["artifact"] = source
        model, art = _torch_model(path)
        if n_tok > art.spec.block_size - 1:
            raise BenchError(
                f"tokens is {n_tok} but {source} has block_size "
                f"{art.spec.block_size}: pass --tokens "
                f"{art.spec.block_size - 1} or less"
            )
        bos = art.spec.bos_token if art.spec.bos_token is not None else 0
        prompt = torch.tensor([[bos]], dtype=torch.long)
        group = f"{shape.name} ({'trained' if artifact else 'synthetic'}), {n_tok} tokens"
        variants, runs, not_run = [], {}, dict(unavailable or {})
        threads_of: dict[str, int] = {}
        for variant, gs_run in engines.items():
            # a threaded build also on one thread: separates its compiler flags (-O3
            # -march=native) from its threads
            for n in [1] if variant == "release" else sorted({1, threads}):
                name = f"C engine {variant} ({n} thread{'s' if n > 1 else ''})"
                runs[name] = EngineRun(Path(gs_run), path, bos, n_tok, n)
                threads_of[name] = n
                variants.append(Variant(name, runs[name], [None], timing="self"))
        torch_out: dict[str, list[int]] = {}
        for n in sorted({1, threads}):
            name = f"PyTorch fp32 eager, KV cache ({n} thread{'s' if n > 1 else ''})"
            threads_of[name] = n

            def fn(_, n=n, name=name):
                torch.set_num_threads(n)
                out = generate(model, prompt, n_tok, mode="kv", temperature=0)
                torch_out[name] = out[0, 1:].tolist()
                return out

            variants.append(Variant(name, fn, [None], timing="cpu"))
        ctx.progress.row(group)
        try:
            cmp = compare(variants, ctx.settings, device=torch.device("cpu"), progress=ctx.progress)
        finally:
            torch.set_num_threads(torch_threads)
    baseline = "PyTorch fp32 eager, KV cache (1 thread)"
    reference_tokens = torch_out.get(baseline)
    for v in variants:
        if v.name not in cmp.measurements:
            ctx.result.add_row(
                make_row(
                    section="engine",
                    group=group,
                    name=v.name,
                    status="error",
                    note=cmp.failures.get(v.name, "did not run"),
                )
            )
            continue
        m = cmp.measurements[v.name]
        med = m.stats["median"]
        metrics = {"tokens_per_s": n_tok / med, "ms_per_token": med / n_tok * 1e3}
        run = runs.get(v.name)
        if run is not None and run.wall_s:
            metrics["process_wall_s"] = float(np.median(run.wall_s))
        if run is not None and run.weight_bytes_per_token is not None:
            metrics["weight_bytes_per_token"] = run.weight_bytes_per_token
        ids = run.tokens if run is not None else torch_out.get(v.name)
        if reference_tokens is not None and ids:
            metrics["greedy_match_vs_torch"] = _match(ids, reference_tokens)
        ratios = ratio_entries(cmp, v.name, {"vs_torch_1t": baseline})
        ctx.result.add_row(
            make_row(
                section="engine",
                group=group,
                name=v.name,
                params={"threads": threads_of[v.name]},
                measurement=m,
                metrics=metrics,
                ratios=ratios,
            )
        )
    for variant, why in not_run.items():
        ctx.result.add_row(
            make_row(
                section="engine",
                group=group,
                name=f"C engine {variant}",
                status="skipped",
                note=why,
            )
        )
    return ctx.finish()


def _declare(ctx: SuiteContext) -> None:
    ctx.result.table(
        "C engine vs PyTorch on the CPU (batch 1, greedy)",
        "engine",
        [
            Column("model", "group"),
            Column("engine", "name"),
            Column("tokens/s", "metrics.tokens_per_s", "num"),
            Column("ms/token", "metrics.ms_per_token", "num"),
            Column("s per run (median, min–max)", "time_s", "time_s"),
            Column("× vs PyTorch 1 thread", "ratios.vs_torch_1t", "ratio"),
            Column("weight bytes/token", "metrics.weight_bytes_per_token", "int"),
            Column("greedy tokens = PyTorch's", "metrics.greedy_match_vs_torch", "pct"),
            Column("note", "note"),
        ],
        about="The C engine computes in int8 (W8A8, FORMAT.md section 7); PyTorch runs the same "
        "weights dequantized to fp32. 'greedy tokens = PyTorch's' is the fraction of tokens "
        "before the first difference (int8 rounding changes near-ties; not a correctness "
        "test: the firmware tests compare the engine with the numpy reference). 'weight "
        "bytes/token' is the engine's count of artifact bytes read per generated token "
        "(gs-run --stats), the flash traffic the board would see.",
    )
    ctx.result.plot(
        "bars",
        "engine",
        "C engine vs PyTorch: tokens/s",
        value="metrics.tokens_per_s",
        label="group",
        series="name",
        log=False,
        ylabel="tokens/s",
    )
