"""The acceptance scenarios of tests/scenarios/*.yaml, read with yaml.safe_load and checked against a schema.

A file holds either `scenarios:` (answers run through the wizard, with the decision expected) or
`checks:` (files a user brings to `backend-wizard check`, with the findings expected). A
top-level `shared:` mapping may hold YAML anchors the entries refer to; it is otherwise ignored.

A scenario entry:

* `name` (required, unique over all files), `row` (the acceptance table's row, 1-44, several
  entries may share one), `note` (why the expectation differs from the table's first guess);
* `answers` (required): the answers file's mapping; `deepspeed_json`: a DeepSpeed JSON the user
  brings, written to a file whose path becomes the `deepspeed_config` answer;
* then either `error` (`{type: invalid_answer, key: ANSWER}` or `{type: deepspeed_config}`: the run
  is refused as input, naming that answer), or `rule` and `backend` (required together; `backend`
  is null for a refusal, which also says `refused: true`) and `settings`: the recommendation's
  settings that must have these values (the keys not listed are not compared).

A check entry: `name`, `row`, `note` as above; `files` (file name -> content, written as JSON for
`.json` and YAML otherwise), `check` (the file checked), `world_size`, `exit` (the exit code) and
`findings` (every finding on the checked file, as `{check, severity, path}`, in order).

A missing or unknown key, or a value of the wrong type, raises ScenarioFileError naming the file
and the entry.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

FOLDER = Path(__file__).resolve().parent / "scenarios"
ROW_COUNT = 44  # the acceptance table's rows; every one is covered by at least one entry

_COMMON = {"name": str, "row": int, "note": str}
_SCENARIO_KEYS: dict[str, Any] = {
    **_COMMON,
    "answers": dict,
    "deepspeed_json": dict,
    "error": dict,
    "rule": str,
    "backend": (str, type(None)),
    "refused": bool,
    "settings": dict,
}
_CHECK_KEYS: dict[str, Any] = {
    **_COMMON,
    "files": dict,
    "check": str,
    "world_size": int,
    "exit": int,
    "findings": list,
}
_ERROR_TYPES = ("invalid_answer", "deepspeed_config")


class ScenarioFileError(ValueError):
    """A scenario file that does not follow the schema; the message names the file and the entry."""


@dataclass(frozen=True)
class Scenario:
    """Answers and the decision expected for them (or the answer the run is refused on)."""

    name: str
    file: str
    row: int | None
    note: str | None
    answers: dict[str, Any]
    deepspeed_json: dict[str, Any] | None
    rule: str | None
    backend: str | None
    refused: bool
    settings: dict[str, Any]
    error: dict[str, str] | None

    def answers_in(self, folder: Path) -> dict[str, Any]:
        """The answers, with the brought DeepSpeed JSON (if any) written into `folder` and named."""
        if self.deepspeed_json is None:
            return dict(self.answers)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "brought_ds_config.json"
        path.write_text(json.dumps(self.deepspeed_json), encoding="utf-8")
        return {**self.answers, "deepspeed_config": str(path)}


@dataclass(frozen=True)
class CheckScenario:
    """Files a user brings to `backend-wizard check`, and the findings expected on one of them."""

    name: str
    file: str
    row: int | None
    note: str | None
    files: dict[str, Any]
    check: str
    world_size: int | None
    exit: int
    findings: list[dict[str, str]]

    def write(self, folder: Path) -> Path:
        """Write every file into `folder`; return the path of the one checked."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in self.files.items():
            text = json.dumps(content) if name.endswith(".json") else yaml.safe_dump(content, sort_keys=False)
            (folder / name).write_text(text, encoding="utf-8")
        return folder / self.check


def _fail(path: Path, name: object, problem: str) -> ScenarioFileError:
    return ScenarioFileError(f"{path.name}: entry {name!r}: {problem}")


def _check_keys(path: Path, entry: dict[str, Any], allowed: dict[str, Any], required: tuple[str, ...]) -> None:
    name = entry.get("name", "<no name>")
    for key in required:
        if key not in entry:
            raise _fail(path, name, f"missing key {key!r}")
    for key, value in entry.items():
        if key not in allowed:
            raise _fail(path, name, f"unknown key {key!r} (allowed: {', '.join(allowed)})")
        if not isinstance(value, allowed[key]) or (allowed[key] is int and isinstance(value, bool)):
            raise _fail(path, name, f"{key!r} has the wrong type ({type(value).__name__})")
    row = entry.get("row")
    if row is not None and not 1 <= row <= ROW_COUNT:
        raise _fail(path, name, f"row {row} is not one of the table's rows 1-{ROW_COUNT}")


def _scenario(path: Path, entry: dict[str, Any]) -> Scenario:
    _check_keys(path, entry, _SCENARIO_KEYS, ("name", "answers"))
    name = entry["name"]
    error = entry.get("error")
    decided = [key for key in ("rule", "backend", "refused", "settings") if key in entry]
    if error is not None:
        if decided:
            raise _fail(path, name, f"an entry with 'error' expects no decision ({', '.join(decided)})")
        if set(error) - {"type", "key"} or error.get("type") not in _ERROR_TYPES:
            raise _fail(path, name, f"'error' is {{type: {' or '.join(_ERROR_TYPES)}, key: ANSWER}}, not {error}")
        if error["type"] == "invalid_answer" and not isinstance(error.get("key"), str):
            raise _fail(path, name, "an invalid_answer error names the answer ('key')")
    else:
        for key in ("rule", "backend", "settings"):
            if key not in entry:
                raise _fail(path, name, f"missing key {key!r} (or 'error')")
        if entry.get("refused", False) != (entry["backend"] is None):
            raise _fail(path, name, "a refusal has 'refused: true' and 'backend: null', and only a refusal")
    return Scenario(
        name=name,
        file=path.name,
        row=entry.get("row"),
        note=entry.get("note"),
        answers=entry["answers"],
        deepspeed_json=entry.get("deepspeed_json"),
        rule=entry.get("rule"),
        backend=entry.get("backend"),
        refused=entry.get("refused", False),
        settings=entry.get("settings", {}),
        error=error,
    )


def _check_scenario(path: Path, entry: dict[str, Any]) -> CheckScenario:
    _check_keys(path, entry, _CHECK_KEYS, ("name", "files", "check", "exit", "findings"))
    name = entry["name"]
    if entry["check"] not in entry["files"]:
        raise _fail(path, name, f"'check' names {entry['check']!r}, which is not among 'files'")
    for finding in entry["findings"]:
        if not isinstance(finding, dict) or set(finding) != {"check", "severity", "path"}:
            raise _fail(path, name, f"a finding is {{check, severity, path}}, not {finding!r}")
    return CheckScenario(
        name=name,
        file=path.name,
        row=entry.get("row"),
        note=entry.get("note"),
        files=entry["files"],
        check=entry["check"],
        world_size=entry.get("world_size"),
        exit=entry["exit"],
        findings=entry["findings"],
    )


def load_file(path: Path) -> list[Scenario | CheckScenario]:
    """Every entry of one scenario file, checked against the schema."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    kinds = set(data) - {"shared"} if isinstance(data, dict) else set()
    if kinds not in ({"scenarios"}, {"checks"}):
        raise ScenarioFileError(f"{path.name}: the top level is one of 'scenarios:' or 'checks:' (and 'shared:')")
    (kind,) = kinds
    entries = data[kind]
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ScenarioFileError(f"{path.name}: '{kind}' is a list of mappings")
    make = _scenario if kind == "scenarios" else _check_scenario
    return [make(path, entry) for entry in entries]


def load_folder(folder: Path) -> dict[str, Scenario | CheckScenario]:
    """Every entry of every `*.yaml` file in `folder`, by name (names are unique over the files)."""
    found: dict[str, Scenario | CheckScenario] = {}
    for path in sorted(folder.glob("*.yaml")):
        for entry in load_file(path):
            if entry.name in found:
                raise _fail(path, entry.name, f"the name is also used in {found[entry.name].file}")
            found[entry.name] = entry
    return found


@functools.cache
def _all() -> dict[str, Scenario | CheckScenario]:
    return load_folder(FOLDER)


def scenarios() -> list[Scenario]:
    """The decision scenarios of tests/scenarios/, in file order."""
    return [entry for entry in _all().values() if isinstance(entry, Scenario)]


def checks() -> list[CheckScenario]:
    """The `check` scenarios of tests/scenarios/, in file order."""
    return [entry for entry in _all().values() if isinstance(entry, CheckScenario)]


def scenario(name: str) -> Scenario:
    """One decision scenario by name."""
    entry = _all()[name]
    assert isinstance(entry, Scenario), f"{name} is a check scenario"
    return entry


def answers(name: str) -> dict[str, Any]:
    """A copy of one scenario's answers (one without a brought DeepSpeed JSON)."""
    entry = scenario(name)
    assert entry.deepspeed_json is None, f"{name} brings a DeepSpeed JSON: use answers_in(folder)"
    return dict(entry.answers)
