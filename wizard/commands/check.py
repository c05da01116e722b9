"""`backend-wizard check FILE...`: static checks of existing Accelerate, DeepSpeed and Axolotl configs.

Exit 1 when any file has an error finding, 0 otherwise, 2 when a file cannot be read or parsed
(a YAML key written twice is a warning of that file, not a parse error: the tools keep the later value).
With ``--split DIR``, an Axolotl config that names both DeepSpeed and FSDP is also written out as
two candidates (one per stack) in DIR, and the candidates are checked too.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from wizard.checks import AXOLOTL, FORMATS, Finding, check_config, detect_format
from wizard.checks.split import needs_split, split_stacks
from wizard.commands.common import add_output_argument, path_argument, whole_number
from wizard.config_files import ConfigFileError, load_config_file, make_json_loader
from wizard.errors import ExitCode
from wizard.render.renderer import RenderedFile
from wizard.render.writer import write_files
from wizard.ui.check_view import print_findings
from wizard.user_files import check_folder_name

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA_VERSION = 1
# 64 GPUs on each of 1024 machines: the most the decision tree's questions allow.
MAX_WORLD_SIZE = 64 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The check subcommand's options."""
    parser.add_argument(
        "files",
        nargs="+",
        type=path_argument,
        metavar="FILE",
        help="config files to check: Accelerate YAML, DeepSpeed JSON or Axolotl YAML (one or more; no default)",
    )
    parser.add_argument(
        "--world-size",
        metavar="N",
        help=f"the number of processes the run will have, 1-{MAX_WORLD_SIZE}, for the checks that need it "
        "(default: an Accelerate config's own num_processes; otherwise those checks are skipped)",
    )
    parser.add_argument(
        "--format",
        choices=("auto", *FORMATS),
        default="auto",
        help="what kind of file; auto guesses from its keys (default: %(default)s)",
    )
    add_output_argument(parser)
    parser.add_argument(
        "--split",
        type=path_argument,
        metavar="DIR",
        help="write an Axolotl config that uses both DeepSpeed and FSDP as two candidates, one per stack, "
        "into DIR (default: no split)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --split: replace existing candidate files (default: off, existing files are kept)",
    )


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    """Check every file; all of them are read first, so a bad path fails before any output."""
    args.world_size = whole_number("--world-size", args.world_size, 1, MAX_WORLD_SIZE)
    if args.split is not None:
        check_folder_name(args.split, "--split folder", ConfigFileError)
    loaded = []
    for path in args.files:
        repeated: list[tuple[str, int]] = []
        loaded.append((path, load_config_file(path, repeated), repeated))
    results: list[tuple[Path, str, list[Finding]]] = []
    for path, data, repeated in loaded:
        fmt = detect_format(data, path.suffix) if args.format == "auto" else args.format
        findings = check_config(
            data, fmt, world_size=args.world_size, load_json=make_json_loader(path), duplicate_keys=repeated
        )
        results.append((path, fmt, findings))
        if args.split is not None and fmt == AXOLOTL and needs_split(data):
            for candidate, candidate_data in _write_candidates(path, data, args.split, args.force):
                # Relative DeepSpeed paths stay relative to the original file's folder.
                found = check_config(
                    candidate_data, AXOLOTL, world_size=args.world_size, load_json=make_json_loader(path)
                )
                results.append((candidate, AXOLOTL, found))
    if args.output == "json":
        print(json.dumps(envelope(results), indent=2))
    else:
        print_findings(out, results)
    failed = any(f.severity == "error" for _, _, findings in results for f in findings)
    return int(ExitCode.NOT_OVERWRITTEN if failed else ExitCode.OK)


def _write_candidates(path: Path, data: Any, folder: Path, force: bool) -> list[tuple[Path, dict[str, Any]]]:
    """Write the DeepSpeed-only and FSDP2-only candidates (atomically; never over other content)."""
    files, written = [], []
    for stack, candidate in split_stacks(data).items():
        name = f"{path.stem}.{stack}{path.suffix or '.yaml'}"
        other = "FSDP" if stack == "deepspeed" else "DeepSpeed"
        header = (
            f"# Candidate split from {path.name}: the {other} keys removed, so one sharding stack is left.\n"
            "# Axolotl refuses a config with both deepspeed and fsdp_config; keep the candidate you meant.\n"
        )
        text = header + yaml.safe_dump(candidate, sort_keys=False, allow_unicode=True)
        files.append(RenderedFile(name, text))
        written.append((folder / name, candidate))
    write_files(folder, files, force)
    return written


def envelope(results: list[tuple[Path, str, list[Finding]]]) -> dict[str, Any]:
    """The JSON form: one entry per finding, with its file and format, then one per file checked."""
    return {
        "schema_version": SCHEMA_VERSION,
        "findings": [
            {
                "file": str(path),
                "format": fmt,
                "severity": f.severity,
                "path": f.path,
                "message": f.message,
                "fix": f.fix,
                "tag": f.tag,
                "check": f.check,
            }
            for path, fmt, findings in results
            for f in findings
        ],
        # Every file checked, clean ones too: what a script needs to know which files passed.
        "files": [
            {
                "file": str(path),
                "format": fmt,
                "errors": sum(f.severity == "error" for f in findings),
                "warnings": sum(f.severity == "warning" for f in findings),
            }
            for path, fmt, findings in results
        ],
    }
