"""Compiling the student while its teacher trains (train.compile_ahead).

A run with train.distill_from = "preset:NAME" trains the teacher first, then the student. On a
machine with an empty compile cache, the student's first evaluation and first steps then wait
for torch.compile (Inductor's code generation, Triton's kernel builds), which a second run
finds in the cache (TORCHINDUCTOR_CACHE_DIR, runtime.py) in a fraction of the time (the esp32
preset on an H200: benchmarks/results/run-esp32-h200-pyc-cc-ahead-{true,false}-20261203.log).
The teacher's training keeps the GPU busy and leaves the other CPU cores idle, so meanwhile a
second process compiles the student: it runs the student's first steps, as `train` runs them,
on a stand-in teacher (random weights of the teacher's shape, the run's tokenizer) in a scratch
folder. Its only product is the student's compiled code in the cache; the run finds it there
when the teacher is done. The student itself trains as before, to the same bits.

    ahead = CompileAhead.start(cfg, teacher_cfg, runtime)  # None where it does not apply
    ...                                                     # the teacher trains
    ahead.finish(log)                                       # before the student compiles
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .config import RunConfig
from .runtime import Runtime


class CompileAhead:
    """The second process, its scratch folder and its log."""

    def __init__(self, process: subprocess.Popen, scratch: Path) -> None:
        self.process, self.scratch = process, scratch

    @classmethod
    def start(
        cls, cfg: RunConfig, teacher_cfg: RunConfig, runtime: Runtime, world_size: int = 1
    ) -> CompileAhead | None:
        """Start compiling `cfg`'s student where it pays: on CUDA, with torch.compile, in a
        run of one process, unless train.compile_ahead is false."""
        if (
            not cfg.train.compile_ahead
            or runtime.device.type != "cuda"
            or not runtime.compile
            or world_size > 1
        ):
            return None
        return cls.launch(cfg, teacher_cfg, runtime.compile)

    @classmethod
    def launch(cls, cfg: RunConfig, teacher_cfg: RunConfig, compile_: str | None) -> CompileAhead:
        """The second process, compiling as `compile_` says: the run's resolved
        train.compile (auto depends on max_steps, which the short run does not share)."""
        scratch = Path(tempfile.mkdtemp(prefix="gptstack-compile-ahead-"))
        spec = {"student": cfg.to_dict(), "teacher": teacher_cfg.to_dict()}
        spec["compile"] = compile_ or "false"
        (scratch / "spec.json").write_text(json.dumps(spec))
        with open(scratch / "log.txt", "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "gptstack.tools.compile_ahead", str(scratch)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C is the run's to handle; finish() ends this
            )
        return cls(process, scratch)

    def finish(self, log: Callable[[str], None], wait: bool = True) -> None:
        """Wait for the process (or, `wait=False`, end it) and remove its scratch folder; a
        failure is reported, kept for reading, and costs nothing but the compile it would
        have saved."""
        if not wait and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        code = self.process.wait()
        if code != 0 and wait:
            log(
                f"compile ahead: the second process compiling the student failed (exit {code}; "
                f"log: {self.scratch / 'log.txt'}); the student compiles now instead"
            )
            return
        if wait:
            seconds = self.scratch / "seconds"  # written by the process at its end
            took = f" ({float(seconds.read_text()):.1f} s)" if seconds.is_file() else ""
            log(
                "compile ahead: the student was compiled into the compile cache by a second "
                f"process while the teacher trained{took}"
            )
        shutil.rmtree(self.scratch, ignore_errors=True)


def compile_student(scratch: Path) -> None:
    """The second process: the student's first evaluation and steps on a stand-in teacher."""
    from gptstack.model import GPT, resolve_device

    from .checkpoint import save_checkpoint
    from .data import prepare_corpus
    from .train import FIRST_STEPS, checkpoint_meta, run_model_config, train

    started = time.perf_counter()
    spec = json.loads((scratch / "spec.json").read_text())
    cfg = RunConfig.from_dict(spec["student"], source=str(scratch / "spec.json"))
    teacher_cfg = RunConfig.from_dict(spec["teacher"], source=str(scratch / "spec.json"))
    corpus = prepare_corpus(cfg)  # the tokenizer the teacher trains: same settings, same text
    device_type = resolve_device(cfg.train.device, "train.device =").type
    mcfg = run_model_config(teacher_cfg, corpus.tokenizer.vocab_size, device_type)
    save_checkpoint(
        scratch / "teacher",
        model=GPT(mcfg),
        tokenizer=corpus.tokenizer,
        meta=checkpoint_meta(mcfg, teacher_cfg, corpus, 0),
    )
    short = copy.deepcopy(cfg)
    short.train.distill_from = str(scratch / "teacher")
    short.train.compile = spec["compile"]
    short.train.max_steps = FIRST_STEPS  # compiled, warmed up and captured by then
    short.train.eval_interval = FIRST_STEPS
    short.train.early_stop_evals = 0
    train(short, scratch / "student", corpus=corpus, progress=False, log=lambda _: None)
    (scratch / "seconds").write_text(f"{time.perf_counter() - started:.3f}\n")


if __name__ == "__main__":
    compile_student(Path(sys.argv[1]))
