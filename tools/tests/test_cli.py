import argparse
import json
import subprocess
import sys

import pytest

from gptstack.tools import bench_cli
from gptstack.tools.cli import build_parser, main

# Options owned by another change (firmware run's argument validation): checked there.
NOT_HERE = {("firmware",)}


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "gptstack.tools.cli", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_help_lists_every_subcommand():
    out = run_cli("--help").stdout
    for cmd in (
        "pipeline",
        "tokenizer",
        "train",
        "sample",
        "eval",
        "plot",
        "export",
        "bench",
        "firmware",
    ):
        assert cmd in out
    commands = {path[0] for path, _ in _parsers(build_parser()) if path}
    assert "quantize" not in commands  # one command writes the artifact: export


def test_version_names_every_package():
    from importlib.metadata import version

    proc = run_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"gptstack {version('gptstack-tools')} (")
    for member in ("tokenizer", "model", "quant", "bench"):
        assert f"{member} {version(f'gptstack-{member}')}" in proc.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--debug", "train", "--preset", "nope"],
        ["train", "--preset", "nope", "--debug"],
        ["tokenizer", "decode", "--tokenizer", "gpt2", "--debug", "-1"],
    ],
)
def test_debug_is_accepted_before_and_after_the_subcommand(args, capsys):
    assert main(args) == 2
    assert "Traceback" in capsys.readouterr().err


def test_without_debug_no_traceback(capsys):
    assert main(["train", "--preset", "nope"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def _parsers(parser, path=()):
    """(path of subcommand names, parser) for every parser below `parser`."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_option_has_help_and_shows_its_default():
    missing = []
    for path, parser in _parsers(build_parser()):
        if any(path[: len(p)] == p for p in NOT_HERE):
            continue
        for action in parser._actions:
            if isinstance(
                action, (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)
            ):
                continue
            name = " ".join(path) + " " + (action.option_strings or [action.dest])[-1]
            text = action.help or ""
            if not text:
                missing.append(f"{name}: no help")
                continue
            default = action.default
            if default in (None, False, [], argparse.SUPPRESS) or isinstance(
                action, argparse._StoreTrueAction
            ):
                continue
            shown = "%(default)" in text or str(default) in text
            if not shown:
                missing.append(f"{name}: default {default!r} not in its help")
    assert missing == [], "\n".join(missing)


def test_bench_help_describes_the_suites_not_the_module():
    out = "".join(run_cli("bench", "--help").stdout.split())  # without the line wrapping
    for suite, text in bench_cli.SUITE_HELP.items():
        assert "".join(f"{suite} {text}".split()) in out
    assert "".join(bench_cli.__doc__.split()[-12:]) not in out


@pytest.mark.parametrize(
    "args, words",
    [
        (["train", "--preset", "smoke", "--data", "/nonexistent/x.txt"], "does not exist"),
        (["train", "--preset", "nope"], "unknown preset"),
        (["train", "--preset", "smoke", "--set", "train.bogus=1"], "unknown key"),
        (["train"], "--preset"),
        (["sample", "--ckpt", "/nonexistent/run"], "does not exist"),
        (["eval", "--ckpt", "/nonexistent/run"], "does not exist"),
        (["eval", "--ckpt", "/nonexistent/run", "--val-windows", "some"], "--val-windows"),
        (["export", "--ckpt", "/nonexistent/run", "-o", "m.gsm"], "does not exist"),
        (["plot", "/nonexistent/run"], "metrics.jsonl"),
        (["pipeline", "--resume", "runs/none"], "no pipeline run"),
        (["pipeline", "--preset", "nope"], "unknown preset"),
    ],
)
def test_user_mistakes_give_one_line_and_status_2(args, words, capsys, working_dir):
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2
    assert words in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert list(working_dir.iterdir()) == []  # no run folder left behind by a failed command


NO_TORCH_CHECK = (
    "import sys\n"
    "from gptstack.tools.cli import main\n"
    "try:\n"
    "    code = main(sys.argv[1:])\n"
    "except SystemExit as e:\n"
    "    code = e.code\n"
    "print(code, 'torch' in sys.modules, file=sys.stderr)\n"
)


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["train", "--help"],
        ["tokenizer", "encode", "--tokenizer", "gpt2", "To be"],
        ["tokenizer", "decode", "--tokenizer", "gpt2", "99999999"],
        ["train", "--preset", "nope"],
        ["sample", "--ckpt", "/nonexistent/run"],
        ["export", "--ckpt", "/nonexistent/run", "-o", "x.gsm"],
        ["pipeline", "--resume", "/nonexistent/run"],
    ],
)
def test_commands_that_need_no_torch_never_import_it(args, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", NO_TORCH_CHECK, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    code, imported = proc.stderr.strip().splitlines()[-1].split()
    assert code in ("0", "2") and imported == "False", proc.stderr


def test_empty_data_file(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert (
        main(["train", "--preset", "smoke", "--data", str(empty), "--out", str(tmp_path / "r")])
        == 2
    )
    assert "empty" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_tokenizer_train_encode_decode(tmp_path, small_corpus, capsys):
    out = tmp_path / "tok.json"
    assert (
        main(
            [
                "tokenizer",
                "train",
                "--data",
                str(small_corpus),
                "--vocab-size",
                "300",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    report = capsys.readouterr().out
    assert "bytes/token" in report and out.is_file()
    assert json.loads(out.read_text())  # a readable tokenizer file
    assert main(["tokenizer", "encode", "--tokenizer", str(out), "To be, or not to be"]) == 0
    ids = capsys.readouterr().out.split()
    assert main(["tokenizer", "decode", "--tokenizer", str(out), *ids]) == 0
    assert capsys.readouterr().out == "To be, or not to be\n"
    assert main(["tokenizer", "decode", "--tokenizer", str(out), "99999"]) == 2
    assert "outside" in capsys.readouterr().err
