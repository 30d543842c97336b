"""Nothing lost: a run folder holding checkpoints is refused unless resumed or overwritten, a failed
run leaves no folder, and a further-trained last/ is never replaced by an earlier one."""

import json
import shutil

import pytest

from gptstack.tools import parallel as parallel_mod
from gptstack.tools import train as train_mod
from gptstack.tools.cli import main
from gptstack.tools.config import apply_overrides, load_preset
from gptstack.tools.errors import CheckpointError, GptstackError
from gptstack.tools.run_dir import holds_checkpoints, run_folder
from gptstack.tools.train import train


def smoke_cfg(data, *extra):
    return apply_overrides(load_preset("smoke"), [f"data.path={data}", *extra])


def quiet(s):
    pass


def events(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def last_step(run_dir):
    return json.loads((run_dir / "last" / "config.json").read_text())["step"]


def test_train_refuses_a_folder_with_checkpoints(tmp_path, small_corpus, capsys):
    run = tmp_path / "run"
    train(smoke_cfg(small_corpus, "train.max_steps=6"), run, progress=False, log=quiet)
    before = (run / "metrics.jsonl").read_text()
    with pytest.raises(GptstackError, match="--resume .* --overwrite"):
        train(smoke_cfg(small_corpus, "train.max_steps=6"), run, progress=False, log=quiet)
    args = ["train", "--preset", "smoke", "--data", str(small_corpus), "--out", str(run)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "--overwrite" in err and "step 6" in err
    assert len(err.strip().splitlines()) == 1
    assert (run / "metrics.jsonl").read_text() == before  # nothing appended, nothing replaced


def test_overwrite_starts_over_and_resume_continues(tmp_path, small_corpus):
    run = tmp_path / "run"
    train(smoke_cfg(small_corpus, "train.max_steps=8"), run, stop_at=4, progress=False, log=quiet)
    assert last_step(run) == 4
    train(smoke_cfg(small_corpus, "train.max_steps=8"), run, resume=run, progress=False, log=quiet)
    assert last_step(run) == 8
    assert [e["step"] for e in events(run) if e["event"] == "start"] == [0, 4]
    train(
        smoke_cfg(small_corpus, "train.max_steps=3"), run, overwrite=True, progress=False, log=quiet
    )
    assert last_step(run) == 3
    assert [e["step"] for e in events(run) if e["event"] == "start"] == [0]  # a fresh metrics file
    with pytest.raises(GptstackError, match="pass one of them"):
        train(smoke_cfg(small_corpus), run, resume=run, overwrite=True, progress=False, log=quiet)


def test_resuming_a_finished_run_trains_nothing(tmp_path, small_corpus):
    run = tmp_path / "run"
    train(smoke_cfg(small_corpus, "train.max_steps=4"), run, progress=False, log=quiet)
    before = (run / "metrics.jsonl").read_text()
    result = train(
        smoke_cfg(small_corpus, "train.max_steps=4"), run, resume=run, progress=False, log=quiet
    )
    assert result.step == 4 and not result.interrupted
    assert (run / "metrics.jsonl").read_text() == before


def test_a_run_that_fails_before_its_first_checkpoint_leaves_no_folder(
    tmp_path, small_corpus, monkeypatch
):
    def disk_full(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(parallel_mod, "save_checkpoint", disk_full)  # what train saves through
    run = tmp_path / "new" / "run"
    with pytest.raises(OSError, match="disk full"):
        train(smoke_cfg(small_corpus, "train.max_steps=4"), run, progress=False, log=quiet)
    assert not (tmp_path / "new").exists()  # the parent it created goes too


def test_a_further_trained_last_is_never_replaced(tmp_path, small_corpus, monkeypatch):
    ahead, behind = tmp_path / "ahead", tmp_path / "behind"
    train(smoke_cfg(small_corpus, "train.max_steps=12"), ahead, progress=False, log=quiet)
    train(
        smoke_cfg(small_corpus, "train.max_steps=12"), behind, stop_at=2, progress=False, log=quiet
    )
    real = train_mod.LossEstimator.__call__

    def another_writer_got_ahead(self, **kwargs):
        # a second process training into the same folder saved step 12 meanwhile
        shutil.rmtree(behind / "last")
        shutil.copytree(ahead / "last", behind / "last")
        return real(self, **kwargs)

    monkeypatch.setattr(train_mod.LossEstimator, "__call__", another_writer_got_ahead)
    with pytest.raises(CheckpointError, match="further than this run"):
        train(
            smoke_cfg(small_corpus, "train.max_steps=12", "train.eval_interval=5"),
            behind,
            resume=behind,
            progress=False,
            log=quiet,
        )
    assert last_step(behind) == 12


def test_run_folder_removes_only_what_it_created(tmp_path):
    existing = tmp_path / "kept"
    existing.mkdir()
    with pytest.raises(RuntimeError), run_folder(existing / "a" / "b"):
        (existing / "a" / "b" / "metrics.jsonl").write_text("{}\n")
        raise RuntimeError
    assert existing.is_dir() and not (existing / "a").exists()

    with pytest.raises(KeyboardInterrupt), run_folder(tmp_path / "ckpt") as run:
        (run / "last").mkdir()
        (run / "last" / "config.json").write_text("{}")
        raise KeyboardInterrupt
    assert holds_checkpoints(tmp_path / "ckpt")  # a folder with a checkpoint is kept
