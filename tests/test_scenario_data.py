"""The loader of tests/scenarios/*.yaml: a file that breaks the schema fails naming the file and the entry."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from scenario_data import CheckScenario, Scenario, ScenarioFileError, load_file, load_folder

GOOD: dict[str, Any] = {
    "name": "one_gpu",
    "row": 8,
    "answers": {"target": "axolotl", "model": "7B"},
    "rule": "single_gpu",
    "backend": "single_gpu",
    "settings": {"mixed_precision": "bf16"},
}


def write(folder: Path, name: str, data: Any) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_a_good_entry_loads(tmp_path: Path) -> None:
    (entry,) = load_file(write(tmp_path, "good.yaml", {"scenarios": [GOOD]}))
    assert isinstance(entry, Scenario)
    assert (entry.name, entry.file, entry.rule, entry.settings) == (
        "one_gpu",
        "good.yaml",
        "single_gpu",
        GOOD["settings"],
    )
    assert entry.answers_in(tmp_path / "x") == GOOD["answers"] and not (tmp_path / "x").exists()


def test_a_brought_json_becomes_a_file_and_an_answer(tmp_path: Path) -> None:
    data = {**GOOD, "deepspeed_json": {"zero_optimization": {"stage": 2}}}
    (entry,) = load_file(write(tmp_path, "ds.yaml", {"scenarios": [data]}))
    assert isinstance(entry, Scenario)
    given = entry.answers_in(tmp_path / "brought")
    assert yaml.safe_load(Path(given["deepspeed_config"]).read_text()) == {"zero_optimization": {"stage": 2}}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"rule": None}, "missing key 'rule'"),
        ({"answers": None}, "missing key 'answers'"),
        ({"expected_rule": "x"}, "unknown key 'expected_rule'"),
        ({"settings": ["zero_stage"]}, "'settings' has the wrong type"),
        ({"row": 45}, "row 45 is not one of the table's rows"),
        ({"row": True}, "'row' has the wrong type"),
        ({"backend": None}, "a refusal has 'refused: true'"),
        ({"error": {"type": "invalid_answer", "key": "hardware"}}, "expects no decision"),
    ],
)
def test_a_broken_entry_names_its_file_and_name(tmp_path: Path, change: dict[str, Any], problem: str) -> None:
    data = {k: v for k, v in {**GOOD, **change}.items() if v is not None or k == "backend"}
    with pytest.raises(ScenarioFileError) as info:
        load_file(write(tmp_path, "broken.yaml", {"scenarios": [data]}))
    assert str(info.value).startswith("broken.yaml: entry 'one_gpu': "), info.value
    assert problem in str(info.value)


def test_an_error_entry_names_the_answer(tmp_path: Path) -> None:
    base = {"name": "cpu", "answers": {"hardware": "cpu"}}
    (entry,) = load_file(write(tmp_path, "ok.yaml", {"scenarios": [{**base, "error": {"type": "deepspeed_config"}}]}))
    assert isinstance(entry, Scenario) and entry.error == {"type": "deepspeed_config"}
    for error in ({"type": "invalid_answer"}, {"type": "refused"}, {"type": "invalid_answer", "key": "x", "why": 1}):
        with pytest.raises(ScenarioFileError, match=re.escape("e.yaml: entry 'cpu': ")):
            load_file(write(tmp_path, "e.yaml", {"scenarios": [{**base, "error": error}]}))


def test_a_check_entry_names_a_file_it_brings(tmp_path: Path) -> None:
    data = {"name": "c", "files": {"a.yaml": {"bf16": True}}, "check": "a.yaml", "exit": 0, "findings": []}
    (entry,) = load_file(write(tmp_path, "checks.yaml", {"checks": [data]}))
    assert isinstance(entry, CheckScenario) and entry.write(tmp_path / "w").read_text() == "bf16: true\n"
    with pytest.raises(ScenarioFileError, match=re.escape("checks.yaml: entry 'c': 'check' names 'b.yaml'")):
        load_file(write(tmp_path, "checks.yaml", {"checks": [{**data, "check": "b.yaml"}]}))
    with pytest.raises(ScenarioFileError, match=re.escape("checks.yaml: entry 'c': a finding is")):
        load_file(write(tmp_path, "checks.yaml", {"checks": [{**data, "findings": [{"check": "x"}]}]}))


def test_the_top_level_is_one_list(tmp_path: Path) -> None:
    for data in ({"scenario": [GOOD]}, {"scenarios": [GOOD], "checks": []}, [GOOD], {"scenarios": GOOD}):
        with pytest.raises(ScenarioFileError, match=r"^top\.yaml: "):
            load_file(write(tmp_path, "top.yaml", data))


def test_names_are_unique_over_the_files(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", {"scenarios": [GOOD]})
    write(tmp_path, "b.yaml", {"scenarios": [GOOD]})
    with pytest.raises(ScenarioFileError, match=re.escape("b.yaml: entry 'one_gpu': the name is also used in a.yaml")):
        load_folder(tmp_path)
