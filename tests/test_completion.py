"""`backend-wizard completion SHELL`: the scripts, run by the real shells.

The bash script is sourced in a real bash and its function called as bash's programmable
completion calls it (COMP_WORDS and COMP_CWORD set, COMPREPLY read back). The zsh and fish
scripts must at least parse (`zsh -n`, `fish -n`), and fish's own `complete -C` is asked what it
offers; each is skipped when that shell is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from shell_tools import lint

from wizard.cli import main


def script(shell: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["completion", shell]) == 0
    path = tmp_path / f"backend-wizard.{shell}"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    return path


def bash_complete(path: Path, *words: str) -> list[str]:
    """What the bash completion offers for the command line `words` (the last one is being typed)."""
    quoted = " ".join("'" + word.replace("'", "'\\''") + "'" for word in words)
    code = (
        f"source '{path}'\n"
        f"COMP_WORDS=(backend-wizard {quoted}); COMP_CWORD={len(words)}; COMPREPLY=()\n"
        "_backend_wizard\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    proc = subprocess.run(["bash", "--norc", "-c", code], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


def test_bash_completes_subcommands_options_and_their_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = script("bash", tmp_path, capsys)
    assert bash_complete(path, "est") == ["estimate"]
    assert bash_complete(path, "") == ["estimate", "explain", "tree", "glossary", "check", "completion", "smoke"]
    assert sorted(bash_complete(path, "--ou")) == ["--output", "--output-dir"]
    assert bash_complete(path, "--output", "") == ["text", "json"]
    assert bash_complete(path, "estimate", "--for") == ["--formula"]
    assert bash_complete(path, "estimate", "--formula", "z") == ["zero-paper"]
    assert bash_complete(path, "tree", "--l") == ["--lint"]
    assert bash_complete(path, "completion", "") == ["bash", "zsh", "fish"]
    assert bash_complete(path, "--set", "") == []  # KEY=VALUE: nothing to guess
    # The main command's options are not offered after a subcommand, and the other way round.
    assert "--formula" not in bash_complete(path, "--")
    assert "--dry-run" not in bash_complete(path, "estimate", "--")


def test_bash_completes_file_names_where_a_path_goes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = script("bash", tmp_path, capsys)
    (tmp_path / "answers.yaml").write_text("answers: {}\n", encoding="utf-8")
    typed = str(tmp_path / "answ")
    assert bash_complete(path, "--answers", typed) == [str(tmp_path / "answers.yaml")]
    assert bash_complete(path, "check", typed) == [str(tmp_path / "answers.yaml")]
    assert bash_complete(path, "--output", typed) == []  # text|json only, no file names


def test_the_bash_script_passes_shellcheck(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lint([script("bash", tmp_path, capsys)]) == []


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_the_zsh_script_parses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = script("zsh", tmp_path, capsys)
    assert path.read_text(encoding="utf-8").startswith("#compdef backend-wizard\n")
    proc = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_the_fish_script_parses_and_completes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = script("fish", tmp_path, capsys)
    proc = subprocess.run(["fish", "-n", str(path)], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr

    def offered(line: str) -> list[str]:
        code = f"source '{path}'; complete -C '{line}'"
        done = subprocess.run(
            ["fish", "--no-config", "-c", code], capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stderr
        return sorted(row.split("\t")[0] for row in done.stdout.splitlines())

    assert offered("backend-wizard est") == ["estimate"]
    assert offered("backend-wizard --output ") == ["json", "text"]
    assert offered("backend-wizard completion ") == ["bash", "fish", "zsh"]


def test_an_unknown_shell_exits_2_naming_the_shells(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["completion", "powershell"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'powershell' (choose from 'bash', 'zsh', 'fish')" in err and "Traceback" not in err
