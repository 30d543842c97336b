#!/usr/bin/env bash
# Train gpt2-124m on 2 nodes x 8 GPUs under Slurm: one `gptstack train` per node, which starts
# torchrun there; torchrun's c10d rendezvous on the first node joins them (tools/README.md,
# "Several processes"). An example to adapt, not run in this repository (no cluster here).
#
#   sbatch docs/slurm-train.sh                      # from the repository root
#   sbatch docs/slurm-train.sh --resume runs/gpt2-124m-slurm      # continue the same run
#
# Needs the run directory (and the data) on a filesystem every node sees: rank 0 writes the
# checkpoints, FSDP2's optimizer shards come from every rank, and every rank reads them on resume.
#SBATCH --job-name=gptstack-gpt2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1          # one launcher per node; it starts the 8 processes
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=04:00:00
#SBATCH --output=slurm-%j.out
set -euo pipefail

GPUS_PER_NODE=${GPUS_PER_NODE:-8}
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)   # rendezvous host
PORT=${PORT:-29500}
RUN=${RUN:-runs/gpt2-124m-slurm}

# Each task learns its node rank from Slurm; --rdzv-id defaults to $SLURM_JOB_ID, the same on
# every node. Extra arguments to sbatch (e.g. --resume RUN) are passed on to every node.
srun --kill-on-bad-exit=1 bash -c "
  uv run gptstack train --preset gpt2-124m --out '$RUN' --no-progress \
    --set train.parallel=ddp \
    --nproc-per-node $GPUS_PER_NODE --nnodes \$SLURM_NNODES --node-rank \$SLURM_NODEID \
    --rdzv-endpoint $HEAD:$PORT $*
"
# Without gptstack's launcher, the same with torchrun itself:
#   srun uv run torchrun --nnodes "$SLURM_NNODES" --nproc-per-node "$GPUS_PER_NODE" \
#     --rdzv-backend c10d --rdzv-endpoint "$HEAD:$PORT" --rdzv-id "$SLURM_JOB_ID" \
#     --max-restarts 0 -m gptstack.tools.train_dist --preset gpt2-124m --out "$RUN"
# With --set train.parallel=fsdp the optimizer state is sharded over all 16 GPUs.
