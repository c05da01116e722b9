"""Run `backend-wizard check` over a folder of config files and count the outcomes.

Each file is checked alone, the way a user would run it from its repository's root: every folder
directly under FOLDER is taken as one repository and becomes the current directory while its
files are checked (a relative `deepspeed: deepspeed_configs/zero2.json` resolves from there too).
It prints the number of files, the count per exit code, and the count per finding (check id and
severity); `--files` also lists every file with an error finding or an exit code of 2 and above.

Usage: python bench/check_corpus.py FOLDER [--world-size N] [--files]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from wizard.cli import main as wizard_main  # noqa: E402

SUFFIXES = (".yaml", ".yml", ".json")


def check_one(path: Path, root: Path, world_size: int | None) -> tuple[int, list[dict[str, str]], str]:
    """Exit code, findings and the stderr text of `check --output json` on one file, run from ``root``."""
    argv = ["check", "--output", "json", str(path.relative_to(root))]
    if world_size is not None:
        argv += ["--world-size", str(world_size)]
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = wizard_main(argv)
    finally:
        os.chdir(here)
    try:
        findings = json.loads(out.getvalue())["findings"] if out.getvalue().strip() else []
    except (ValueError, KeyError):
        findings = []
    return code, findings, err.getvalue().strip()


def config_files(folder: Path) -> list[tuple[Path, Path]]:
    """(file, its repository root) for every YAML or JSON file under ``folder``, sorted."""
    found = []
    for root in sorted(p for p in folder.iterdir() if p.is_dir()):
        found += [(f, root) for f in sorted(root.rglob("*")) if f.is_file() and f.suffix.lower() in SUFFIXES]
    return found


def main() -> None:
    """Check every file, then print the counts (and with --files, the files with errors)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder with one sub-folder per repository")
    parser.add_argument("--world-size", type=int, default=None, help="passed on to check (default: none)")
    parser.add_argument("--files", action="store_true", help="list the files with errors or exit 2 and above")
    args = parser.parse_args()
    exits: Counter[int] = Counter()
    by_check: Counter[tuple[str, str]] = Counter()
    listed: list[str] = []
    files = config_files(args.folder.resolve())
    for path, root in files:
        code, findings, err = check_one(path, root, args.world_size)
        exits[code] += 1
        by_check.update((f["severity"], f["check"]) for f in findings)
        errors = sorted({f["check"] for f in findings if f["severity"] == "error"})
        if args.files and (code >= 2 or errors):
            reason = err.splitlines()[0] if code >= 2 and err else ", ".join(errors)
            listed.append(f"  exit {code}  {root.name}/{path.relative_to(root)}: {reason}")
    print(f"files: {len(files)}")
    print("exit codes: " + ", ".join(f"{code}: {count}" for code, count in sorted(exits.items())))
    print("findings (severity, check, count):")
    for (severity, check), count in sorted(by_check.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1])):
        print(f"  {severity:8} {check:36} {count}")
    if listed:
        print("files with errors:")
        print("\n".join(listed))


if __name__ == "__main__":
    main()
