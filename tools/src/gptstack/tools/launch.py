"""`gptstack train ... --nproc-per-node N`: start torchrun, which runs the training in N processes.

    gptstack train --preset gpt2-124m --nproc-per-node 8                  # one node, 8 GPUs
    gptstack train --preset gpt2-124m --nproc-per-node 8 --nnodes 2 \\
        --node-rank 0 --rdzv-endpoint node0:29500                         # on each of 2 nodes

is `python -m torch.distributed.run [rendezvous flags] -m gptstack.tools.train_dist <the same
train flags>`: torchrun's elastic agent starts and watches the processes (no restarts: a
process that fails ends the run, and torchrun's report names its rank), c10d rendezvous joins
the nodes (`--standalone`, a free local port, on one node). The configuration is checked here
first, so a mistake is reported once, before any process starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from .errors import ConfigError, GptstackError

WORKER = "gptstack.tools.train_dist"
MONITOR_INTERVAL_S = 0.5  # how often torchrun's agent checks its processes (its default: 0.1 s)


def add_launch_arguments(parser) -> None:
    g = parser.add_argument_group("several processes (starts torchrun; see tools/README.md)")
    g.add_argument(
        "--nproc-per-node",
        type=int,
        metavar="N",
        help="processes per node, one per GPU (DDP, or FSDP2 with train.parallel=fsdp)",
    )
    g.add_argument("--nnodes", type=int, default=1, metavar="M", help="nodes (default 1)")
    g.add_argument("--node-rank", type=int, default=0, metavar="R", help="this node's rank")
    g.add_argument(
        "--rdzv-endpoint",
        metavar="HOST:PORT",
        help="c10d rendezvous address every node reaches (several nodes)",
    )
    g.add_argument(
        "--rdzv-id",
        metavar="ID",
        help="a job id all nodes pass alike (default $SLURM_JOB_ID, else gptstack)",
    )


def under_torchrun() -> bool:
    """True in a process that torchrun's elastic agent started."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def launch_requested(args) -> bool:
    """Any launch flag, outside torchrun (inside it, the flags were meant for the launcher)."""
    flags = (
        getattr(args, "nproc_per_node", None) is not None,
        getattr(args, "nnodes", 1) != 1,
        getattr(args, "rdzv_endpoint", None) is not None,
    )
    return any(flags) and not under_torchrun()


def torchrun_command(args, worker_args: list[str]) -> list[str]:
    """The torchrun command line for these launch flags and the training flags to pass on."""
    if args.nproc_per_node is None:
        raise ConfigError(
            "--nnodes and --rdzv-endpoint start torchrun: say how many processes "
            "each node runs with --nproc-per-node N (its number of GPUs)"
        )
    if args.nproc_per_node < 1 or args.nnodes < 1:
        raise ConfigError(
            f"--nproc-per-node {args.nproc_per_node} and --nnodes {args.nnodes} must be at least 1"
        )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(args.nproc_per_node),
        "--max-restarts",
        "0",
        "--monitor-interval",
        str(MONITOR_INTERVAL_S),
    ]
    if args.nnodes == 1 and not args.rdzv_endpoint:
        cmd.append("--standalone")
    else:
        if not args.rdzv_endpoint:
            raise ConfigError(
                f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT, an "
                "address of node 0 that every node reaches (e.g. node0:29500)"
            )
        rdzv_id = args.rdzv_id or os.environ.get("SLURM_JOB_ID", "gptstack")
        cmd += [
            "--nnodes",
            str(args.nnodes),
            "--node-rank",
            str(args.node_rank),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            args.rdzv_endpoint,
            "--rdzv-id",
            rdzv_id,
        ]
    return [*cmd, "-m", WORKER, *worker_args]


def worker_args(argv: list[str]) -> list[str]:
    """The flags after the `train` command word, passed on unchanged (the launch flags too: a
    process under torchrun ignores them)."""
    return argv[argv.index("train") + 1 :]


def launch_torchrun(args, cfg, run_dir: Path) -> int:
    """Run torchrun until it ends; its status, or a one-line error on failure."""
    from .distributed import check_divisible

    cmd = torchrun_command(args, worker_args(args.argv))
    world_size = args.nproc_per_node * args.nnodes
    check_divisible(cfg.train.grad_accum, world_size)
    print(f"starting {world_size} processes: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd)
    # Ctrl-C reaches torchrun directly (same process group): it passes it to its processes, which
    # agree on a step to stop after and save last/. A SIGTERM sent to this process (a batch
    # system ending the job) is passed on.
    interrupted = []
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    previous_term = signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        code = proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
    if code == 0:
        return 0
    if interrupted:
        print(f"stopped{_resume_hint(run_dir, args)}", file=sys.stderr)
        return 130
    raise GptstackError(
        f"torchrun ended with status {code}: a process failed or was stopped "
        f'(torchrun\'s report above names its rank, under "Root Cause")'
        f"{_resume_hint(run_dir, args)}"
    )


def _resume_hint(run_dir: Path, args) -> str:
    try:
        step = json.loads((run_dir / "last" / "config.json").read_text())["step"]
    except (OSError, ValueError, KeyError):
        return ""
    return (
        f"; the last checkpoint {run_dir / 'last'} (step {step}) loads: continue with "
        f"`gptstack train --resume {run_dir} --nproc-per-node {args.nproc_per_node}`"
    )
