"""Commands RAGEN suggests (``ragen run --resume DIR``, ``ragen plot DIR``) paste as printed, even when
the folder's path holds spaces or shell characters (they used to be printed bare: the shell split a
path with a space into two words)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest

from ragen_core.cli.main import main
from ragen_core.errors import ConfigError, shell_word
from ragen_core.trainer.run_dir import claim_run_dir


@pytest.mark.parametrize("path", ["/runs/plain", "/runs/my run", "/runs/cost $5", "/runs/it's", "/runs/a\"b c", "/runs/wow!",
                                  "/runs/$HOME `x` \\y"])
def test_a_suggested_path_is_one_shell_word(path):
    assert bash_words(f"ragen run --resume {shell_word(path)}") == ["ragen", "run", "--resume", path]


def bash_words(command: str) -> list[str]:
    """The words bash makes of ``command`` (shlex does not undo bash's escapes inside double quotes)."""
    if shutil.which("bash") is None:
        return shlex.split(command)
    done = subprocess.run(["bash", "-c", f"printf '%s\\0' {command}"], capture_output=True, check=True, env={})
    return done.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]  # bytes: text mode reads a \r as \n


@pytest.mark.parametrize("path", ["/runs/a\nb", "/runs/tab\there", "/runs/it's\nwow! $HOME `x` \\y \"q\"", "/runs/bell\x07",
                                  "/runs/line\u2028sep", "/runs/caf\u00e9\r", "/runs/not-utf8-\udcff"])
def test_a_suggested_path_with_a_newline_stays_one_line_and_one_shell_word(path):
    """A run folder named with a newline split the suggested command over two lines (the shell then
    ran its first half)."""
    if shutil.which("bash") is None:
        pytest.skip("$'...' is bash's quoting: shlex does not read it")
    word = shell_word(path)
    assert len(f"ragen run --resume {word}".splitlines()) == 1 and word.isprintable()
    assert word.startswith("$'")
    assert bash_words(f"ragen run --resume {word}") == ["ragen", "run", "--resume", path]


def test_the_resume_hint_of_a_used_folder_named_with_a_newline_is_one_line(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("$'...' is bash's quoting: shlex does not read it")
    run_dir = tmp_path / "sokoban\n1"
    (run_dir / "checkpoints" / "step_1").mkdir(parents=True)
    with pytest.raises(ConfigError) as info:
        claim_run_dir(run_dir)
    hint = info.value.hints[0]
    assert len(hint.splitlines()) == 1
    command = hint.removeprefix("continue that run with '").split("', choose", 1)[0]
    assert bash_words(command) == ["ragen", "run", "--resume", str(run_dir)]


def test_a_plain_path_is_printed_unquoted():
    assert shell_word("/runs/sokoban_1") == "/runs/sokoban_1"


@pytest.mark.parametrize("name", ["sokoban 1", "cost $5", "cost $5 it's"])
def test_the_resume_hint_of_a_used_folder_with_a_space_pastes_as_one_word(tmp_path, name):
    """A folder named with $ and ' was single-quoted inside the hint's single quotes (helper-76's walk)."""
    run_dir = tmp_path / "my runs" / name
    (run_dir / "checkpoints" / "step_1").mkdir(parents=True)
    with pytest.raises(ConfigError) as info:
        claim_run_dir(run_dir)
    hint = info.value.hints[0]
    assert hint.startswith("continue that run with '")
    command = hint.removeprefix("continue that run with '").split("', choose", 1)[0]  # the hint quotes the whole command
    assert bash_words(command) == ["ragen", "run", "--resume", str(run_dir)]
    assert command.count("'") == str(run_dir).count("'")  # no single quotes of its own inside the hint's


def test_plot_of_a_metrics_file_suggests_its_folder_quoted(tmp_path, capsys):
    run_dir = tmp_path / "run one"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "train/reward": 0.5}) + "\n", encoding="utf-8")
    assert main(["plot", str(run_dir / "metrics.jsonl")]) == 2
    err = capsys.readouterr().err
    said = err.split("ragen plot ", 1)[1].splitlines()[0]
    assert shlex.split(said) == [str(run_dir)]


def test_a_used_folder_names_the_python_calls_beside_the_flags(tmp_path):
    """A notebook user calling Trainer(config) was told only about --resume and --overwrite."""
    used = tmp_path / "used"
    (used / "checkpoints" / "step_1").mkdir(parents=True)
    with pytest.raises(ConfigError) as info:
        claim_run_dir(used)
    assert "Trainer(config, resume=True) or Trainer(config, overwrite=True)" in info.value.hints[0]
    empty_handed = tmp_path / "no-checkpoint"
    empty_handed.mkdir()
    (empty_handed / "metrics.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        claim_run_dir(empty_handed)
    assert "--overwrite to start it again (Trainer(config, overwrite=True))" in info.value.hints[0]
