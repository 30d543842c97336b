"""Data-parallel training on CPU processes (gloo), started the way users start it.

Two processes against one at the same global batch (DDP and FSDP2), checkpoints moving between
world sizes and kinds, and a killed rank. The multi-process tests launch real torchrun jobs
(`gptstack train --nproc-per-node 2`, `torchrun -m gptstack.tools.train_dist`), so they are slow;
the rest check the pieces in one process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gptstack.model import GPT, GPTConfig, configure_adamw
from gptstack.tools.checkpoint import (
    load_checkpoint,
    load_optimizer_shards,
    load_whole_optimizer_state,
    save_optimizer_shards,
)
from gptstack.tools.cli import main
from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.data import Corpus
from gptstack.tools.distributed import World, restore_rng, rng_state
from gptstack.tools.errors import ConfigError
from gptstack.tools.evaluate import LossEstimator
from gptstack.tools.parallel import distributed_runtime
from gptstack.tools.runtime import Runtime
from gptstack.tools.train import train

# The smoke preset at 4 micro-batches of 4 sequences per step: 2 per rank with 2 processes, so
# the gradient sync is skipped on one micro-batch of each step (no_sync).
SETTINGS = [
    "train.dtype=fp32",  # float32 on every CPU (auto picks bf16 where the CPU has it): exact sums
    "train.grad_accum=4",
    "train.batch_size=4",
    "train.max_steps=12",
    "train.eval_interval=3",
    "train.log_interval=1",
]
REL = 1e-5  # loss agreement between world sizes: float32 reduction order only
DEADLINE_S = 600  # a launched job must end within this, or the test fails (no hang)


def cli_flags(data: Path, out: Path, *extra: str) -> list[str]:
    sets = [arg for s in [*SETTINGS, *extra] for arg in ("--set", s)]
    return ["--preset", "smoke", "--data", str(data), *sets, "--out", str(out), "--no-progress"]


def run_in_process(data: Path, out: Path, *extra: str, resume=None, stop_at=None):
    cfg = apply_overrides(load_preset("smoke"), [f"data.path={data}", *SETTINGS, *extra])
    return train(cfg, out, resume=resume, stop_at=stop_at, progress=False, log=lambda s: None)


def losses(run: Path) -> tuple[dict[int, float], dict[int, float]]:
    """step -> logged train loss and step -> val loss (a resumed run's later lines win)."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_ = {r["step"]: r["loss"] for r in records if r["event"] == "train"}
    val = {r["step"]: r["val_loss"] for r in records if r["event"] == "eval"}
    return train_, val


def assert_curves_match(run: Path, reference: Path, steps: range) -> None:
    (a, va), (b, vb) = losses(run), losses(reference)
    assert [a[s] for s in steps] == pytest.approx([b[s] for s in steps], rel=REL)
    evals = [s for s in va if s in steps]
    assert [va[s] for s in evals] == pytest.approx([vb[s] for s in evals], rel=REL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch(args: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(args, check=False, capture_output=True, text=True, timeout=DEADLINE_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def gptstack_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gptstack.tools.cli", *args]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, shakespeare_text):
    """One process, 12 steps (stopped at 6 and resumed, which is exact), and its step-6 last/."""
    root = tmp_path_factory.mktemp("reference")
    data = root / "small.txt"
    data.write_text(shakespeare_text[:60_000], encoding="utf-8")
    before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    # one thread, as in each torchrun process; the variable keeps train()'s thread policy there
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    try:
        run_in_process(data, root / "run", stop_at=6)
        shutil.copytree(root / "run" / "last", root / "at6" / "last")
        run_in_process(data, root / "run", resume=root / "run")
    finally:
        torch.set_num_threads(before)
        if env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env
    return data, root / "run", root / "at6"


# --- in one process ------------------------------------------------------------------------


@pytest.mark.parametrize("grad_accum,world_size", [(1, 1), (4, 2), (6, 3), (8, 8), (12, 4)])
def test_ranks_split_each_step_into_disjoint_micro_batches(grad_accum, world_size):
    shares = [World(rank=r, size=world_size).micro_batches(grad_accum) for r in range(world_size)]
    flat = [i for share in shares for i in share]
    assert sorted(flat) == list(range(grad_accum))  # every index once: the one-process batch
    assert {len(share) for share in shares} == {grad_accum // world_size}


@pytest.mark.parametrize("grad_accum,world_size", [(1, 2), (3, 2), (4, 3)])
def test_a_step_that_does_not_split_is_a_one_line_error(grad_accum, world_size):
    with pytest.raises(ConfigError, match=f"grad_accum = {grad_accum} .* {world_size} processes"):
        World(rank=0, size=world_size).micro_batches(grad_accum)


def test_launcher_checks_the_config_before_starting_torchrun(capsys):
    # smoke has grad_accum 1: two processes cannot split it; nothing is started
    assert main(["train", "--preset", "smoke", "--nproc-per-node", "2"]) == 2
    err = capsys.readouterr().err
    assert "train.grad_accum = 1" in err and "--set train.grad_accum=2" in err
    assert "starting" not in err and len(err.strip().splitlines()) == 1
    assert (
        main(
            [
                "train",
                "--preset",
                "smoke",
                "--nproc-per-node",
                "2",
                "--nnodes",
                "2",
                "--set",
                "train.grad_accum=4",
            ]
        )
        == 2
    )
    assert "--rdzv-endpoint" in capsys.readouterr().err
    assert main(["train", "--preset", "smoke", "--nnodes", "2"]) == 2  # not one process, silently
    assert "--nproc-per-node N" in capsys.readouterr().err


def test_several_processes_drop_the_whole_step_cuda_graph():
    graph = Runtime(torch.device("cpu"), "fp32", False, None, cuda_graph=True)
    assert distributed_runtime(graph, World(), "auto").cuda_graph  # one process keeps it
    assert not distributed_runtime(graph, World(rank=1, size=2), "auto").cuda_graph
    with pytest.raises(ConfigError, match="cuda_graph = true is for one process"):
        distributed_runtime(graph, World(rank=0, size=2), "true")


class _SummingWorld(World):
    """A world whose all-reduce adds the other ranks' partial sums, computed beforehand."""

    def __init__(self, rank, size, others):
        super().__init__(rank=rank, size=size)
        object.__setattr__(self, "others", others)

    def sum(self, values):
        return [float(v) + sum(o[i] for o in self.others) for i, v in enumerate(values)]


class _RecordingWorld(World):
    def sum(self, values):
        object.__setattr__(self, "partial", [float(v) for v in values])
        return [float(v) for v in values]


@pytest.mark.parametrize("world_size,batches", [(2, 4), (3, 4), (4, 3)])
def test_evaluation_shares_add_up_to_the_one_process_loss(world_size, batches, tiny_corpus):
    torch.manual_seed(3)
    model = GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=16))
    runtime = Runtime(torch.device("cpu"), "fp32", False, None)
    kw = {"batch_size": 2, "block_size": 8, "batches": batches, "seed": 5, "runtime": runtime}

    def estimate_loss(model, corpus, world=None, **kw):
        return LossEstimator(model, corpus, world=world, **kw)()

    one = estimate_loss(model, tiny_corpus, **kw)
    partials = []
    for r in range(world_size):  # what each rank contributes to the all-reduce
        w = _RecordingWorld(rank=r, size=world_size)
        estimate_loss(model, tiny_corpus, **kw, world=w)
        partials.append(w.partial)
    for r in range(world_size):
        others = [p for i, p in enumerate(partials) if i != r]
        shared = estimate_loss(model, tiny_corpus, **kw, world=_SummingWorld(r, world_size, others))
        # the losses add up on the device in float32: only the summation order differs
        assert shared == pytest.approx(one, rel=1e-6)


@pytest.fixture
def tiny_corpus():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 32, 400).astype(np.uint16)
    return Corpus("random", "", None, tokens[:300], tokens[300:], "", "")


def _trained(seed: int):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=40, block_size=8, n_layer=2, n_head=2, n_embd=16))
    opt = configure_adamw(model, 0.1, 1e-3, (0.9, 0.95), "cpu")
    for _ in range(2):
        x = torch.randint(0, 40, (2, 8))
        model(x, x)[1].backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _fresh_like(model):
    twin = GPT(model.config)
    twin.load_state_dict(model.state_dict())
    return twin, configure_adamw(twin, 0.1, 1e-3, (0.9, 0.95), "cpu")


def _assert_same_optimizer(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for k in sa["state"]:
        for name, value in sa["state"][k].items():
            assert torch.equal(value, sb["state"][k][name]), (k, name)


@pytest.mark.slow  # importing torch.distributed.checkpoint alone takes seconds
def test_optimizer_shards_round_trip_in_one_process(tmp_path):
    model, opt = _trained(1)
    save_optimizer_shards(model, opt, tmp_path / "optimizer")
    assert (tmp_path / "optimizer" / ".metadata").is_file()
    twin, twin_opt = _fresh_like(model)
    load_optimizer_shards(twin, twin_opt, tmp_path / "optimizer")
    _assert_same_optimizer(opt, twin_opt)
    before = {k: v.clone() for k, v in twin.state_dict().items()}
    load_optimizer_shards(twin, twin_opt, tmp_path / "optimizer")  # loading moves no weight
    assert all(torch.equal(before[k], v) for k, v in twin.state_dict().items())


@pytest.mark.slow  # importing torch.distributed.checkpoint alone takes seconds
def test_a_whole_optimizer_state_loads_by_parameter_name(tmp_path):
    model, opt = _trained(2)
    twin, twin_opt = _fresh_like(model)
    load_whole_optimizer_state(twin, twin_opt, opt.state_dict())
    _assert_same_optimizer(opt, twin_opt)


def test_each_rank_restores_its_own_random_stream():
    saved = {"torch_rng": torch.get_rng_state(), "cuda_rng": None}
    torch.manual_seed(11)
    two = {**saved, "rank_rng": [saved, {"torch_rng": torch.get_rng_state(), "cuda_rng": None}]}
    expected = torch.rand(3)
    cpu = torch.device("cpu")
    restore_rng(two, World(rank=1, size=2), cpu, seed=0)
    assert torch.equal(torch.rand(3), expected)  # rank 1 continues its own stream
    restore_rng(two, World(rank=2, size=3), cpu, seed=0)  # a rank the saving run lacked
    fresh = torch.rand(3)
    torch.manual_seed(0 + 2)
    assert torch.equal(fresh, torch.rand(3))
    assert rng_state(World(), cpu).keys() == {"torch_rng", "cuda_rng"}  # one process: as before


# --- several processes (torchrun) ----------------------------------------------------------


@pytest.mark.slow
def test_two_ddp_processes_train_as_one_and_one_process_resumes(tmp_path, reference, one_thread):
    data, ref, _ = reference
    run = tmp_path / "ddp"
    out = launch(
        gptstack_cmd("train", *cli_flags(data, run), "--nproc-per-node", "2", "--stop-at", "6")
    )
    assert "2 processes (gloo, DDP)" in out.stdout
    assert_curves_match(run, ref, range(1, 7))
    assert set(losses(run)[1]) == {0, 3}  # --stop-at saves last/ without evaluating
    state = torch.load(run / "last" / "train_state.pt", weights_only=True)
    assert state["world_size"] == 2 and len(state["rank_rng"]) == 2 and state["step"] == 6
    # the two-process checkpoint continues in one process, on the same curve
    run_in_process(data, run, resume=run)
    assert_curves_match(run, ref, range(7, 13))
    # Weights per tensor, by relative norm: Adam divides by sqrt(v), so float rounding on an
    # element with a near-zero gradient can move that one element by up to 2 x lr.
    mine, theirs = load_checkpoint(run / "last").model, load_checkpoint(ref / "last").model
    for (name, p), q in zip(mine.state_dict().items(), theirs.state_dict().values(), strict=True):
        assert (p - q).norm() <= 1e-3 * q.norm(), name


@pytest.mark.slow
def test_fsdp_continues_one_process_and_one_process_continues_its_shards(
    tmp_path, reference, one_thread
):
    data, ref, at6 = reference
    run = tmp_path / "fsdp"
    shutil.copytree(at6, run)
    port = free_port()
    launch(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            f"localhost:{port}",
            "--max-restarts",
            "0",
            "-m",
            "gptstack.tools.train_dist",
            *cli_flags(data, run, "train.parallel=fsdp"),
            "--resume",
            str(run),
            "--stop-at",
            "9",
        ]
    )
    assert_curves_match(run, ref, range(7, 10))
    last = run / "last"
    state = torch.load(last / "train_state.pt", weights_only=True)
    assert state["optimizer_shards"] == "optimizer" and "optimizer" not in state
    assert {p.name for p in (last / "optimizer").iterdir()} >= {
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
    }
    load_checkpoint(last)  # the single-process tools read the gathered model.safetensors
    run_in_process(data, run, "train.parallel=fsdp", resume=run)  # one process, DCP shards
    assert_curves_match(run, ref, range(10, 13))
    assert 12 in losses(run)[1]


def _rank_pid(marker: str, rank: int) -> int | None:
    """The pid of the training process of `rank` whose command line holds `marker`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"gptstack.tools.train_dist" in cmdline
            and marker.encode() in cmdline
            and f"RANK={rank}".encode() in environ
        ):
            return int(entry.name)
    return None


@pytest.mark.slow
def test_a_killed_rank_ends_the_run_naming_it_and_the_last_checkpoint_loads(
    tmp_path, reference, one_thread
):
    data, _, _ = reference
    run = tmp_path / "killed"
    job = subprocess.Popen(
        gptstack_cmd(
            "train",
            *cli_flags(data, run, "train.max_steps=100000", "train.eval_interval=4"),
            "--nproc-per-node",
            "2",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        start = time.monotonic()
        while not (run / "last" / "train_state.pt").is_file():
            assert job.poll() is None and time.monotonic() - start < DEADLINE_S, "no checkpoint"
            time.sleep(0.5)
        pid = _rank_pid(str(run), rank=1)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        output, _ = job.communicate(timeout=120)  # the survivor must not wait for a timeout
        ended_s = time.monotonic() - killed
    finally:
        job.kill()
    assert job.returncode != 0
    # torchrun's report names the killed rank with its signal (under "Root Cause", or under the
    # other failures when rank 0's broken collective is observed first: a race under load)
    assert re.search(r"rank\s*:\s*1 \(local_rank: 1\)\s*exitcode\s*:\s*-9", output), output[-3000:]
    assert "torchrun ended with status" in output and "--resume" in output
    assert ended_s < 120
    # the last checkpoint written before the failure loads, and the run continues from it
    step = json.loads((run / "last" / "config.json").read_text())["step"]
    load_checkpoint(run / "last")
    result = run_in_process(
        data, run, "train.max_steps=100000", "train.eval_interval=4", resume=run, stop_at=step + 2
    )
    assert result.step == step + 2
