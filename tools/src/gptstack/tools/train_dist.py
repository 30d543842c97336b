"""One process of a data-parallel run: `gptstack train` under torchrun.

    uv run torchrun --nproc-per-node 4 -m gptstack.tools.train_dist --preset gpt2-124m
    gptstack train --preset gpt2-124m --nproc-per-node 4          # the same: starts torchrun

Takes `gptstack train`'s flags. Every process joins the process group (distributed.py) and runs
the one training loop (train.py) on its share of each step; rank 0 alone prints, writes
metrics.jsonl, the checkpoints, loss.png and summary.json. A process that dies ends the run:
torchrun's agent stops the others at once and names the failed rank in its report ("Root
Cause"); on other nodes, a rank waiting for a lost peer fails when its collective does (a closed
connection, or the process-group timeout train.dist_timeout_s) and says so. The `last/`
checkpoint of the latest evaluation loads, with any number of processes.
"""

from __future__ import annotations

import sys
import traceback

from torch.distributed.elastic.multiprocessing.errors import record

from .distributed import World
from .errors import user_errors


@record  # an uncaught error's traceback goes into torchrun's report
def main(argv: list[str] | None = None) -> int:
    from .cli import build_parser

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    args = build_parser().parse_args([*(["--debug"] if debug else []), "train", *argv])
    args.argv = ["train", *argv]
    world = World.from_env()
    tag = "" if world.is_main else f" (rank {world.rank})"
    try:
        return int(args.func(args) or 0)
    except Exception as e:
        if not isinstance(e, user_errors()):
            if world.size > 1 and isinstance(e, RuntimeError):
                print(
                    f"gptstack train{tag}: a collective failed, most likely because another "
                    "process died (torchrun's report names it); the run's last/ checkpoint "
                    f"loads: continue with --resume. {str(e).splitlines()[0]}",
                    file=sys.stderr,
                    flush=True,
                )
            raise
        if debug:
            traceback.print_exc()
        # The same mistake stops every process: one line per node, not one per process.
        if world.local_rank == 0:
            print(f"gptstack train{tag}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
