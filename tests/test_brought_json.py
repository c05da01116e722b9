"""A DeepSpeed JSON the user brings (`deepspeed_config`) travels with the output folder.

The folder is what goes to every machine, so the JSON is copied into it as ds_config.json (the
parsed content serialized again, checked like the wizard's own JSON) and every config names it
relatively, exactly as the wizard's own ds_config.json: Accelerate's `deepspeed_config_file` (with
launch.sh passing the absolute path in the folder) and Axolotl's `deepspeed` (launch.sh runs from
the folder). One behaviour for one machine or several, for both targets.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import enumerate_paths
from shell_tools import run_script

from helpers import FOUR_A100_40GB_13B_FULL, decide, file, next_says, parsed
from realtools import accelerate_dry_run, axolotl_validate, deepspeed_parse
from wizard.app import Result
from wizard.errors import DeepSpeedConfigError, WizardError
from wizard.render.renderer import json_document

AUTO_BATCH = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
}
# What users bring: the plain ZeRO-3 JSON, one with offload, one with sections the wizard never
# writes (optimizer, scheduler, non-ASCII text, small floats), one with NVMe paths (device paths,
# the same on every machine by design).
BROUGHT: dict[str, dict[str, Any]] = {
    "zero3": {**AUTO_BATCH, "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}},
    "zero3_offload": {
        **AUTO_BATCH,
        "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
    },
    "zero2_extras": {
        **AUTO_BATCH,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": "auto"},
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": [0.9, 0.95], "eps": 1e-8}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}},
        "zero_optimization": {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 500000000},
        "comms_logger": {"enabled": False, "prof_ops": ["all_reduce"]},
        "wandb": {"enabled": False, "project": "déjà-vu ✓"},
    },
    "zero3_nvme": {
        **AUTO_BATCH,
        "bf16": {"enabled": "auto"},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"},
            "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"},
        },
    },
}
DEVICE_PATH_KEYS = {"nvme_path"}  # absolute by design: a disk every machine has at that path
ABSOLUTE_WORD = re.compile(r"(?:^|[\s=])['\"]?(/[A-Za-z][^\s'\"]*)")


def canonical(data: Any) -> str:
    """Equal for equal JSON content, telling true from 1 and 1.0 from 1."""
    return json.dumps(data, sort_keys=True)


def bring(folder: Path, name: str, data: dict[str, Any] | None = None) -> str:
    path = folder / "brought" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(BROUGHT[name] if data is None else data), encoding="utf-8")
    return str(path)


def with_brought_json(folder: Path) -> Iterator[tuple[dict[str, Any], str]]:
    """Every path of the tree that takes a DeepSpeed JSON, with each kind of JSON in turn."""
    names = list(BROUGHT)
    index = 0
    for answers in enumerate_paths(folder):
        if "deepspeed_config" not in answers:
            continue
        for _ in range(2):  # two kinds per path, so that every kind meets every target and size
            name = names[index % len(names)]
            index += 1
            yield {**answers, "deepspeed_config": bring(folder, name)}, name


@pytest.fixture(scope="module")
def brought(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[dict[str, Any], str, Result]]]:
    folder = tmp_path_factory.mktemp("brought_paths")
    results = []
    for answers, name in with_brought_json(folder):
        try:
            result = decide(answers, folder / "out")
        except WizardError:
            continue  # a JSON this hardware refuses (bf16 on a GPU without it, say)
        if not result.recommendation.refused:
            results.append((answers, name, result))
    return folder, results


def strings(data: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string value in parsed YAML/JSON, with the key it sits under."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from strings(v, str(k))
    elif isinstance(data, list):
        for item in data:
            yield from strings(item, key)
    elif isinstance(data, str):
        yield key, data


def outside_references(result: Result, root: Path) -> list[str]:
    """What in the written files (answers.yaml aside) points outside the output folder."""
    found = []
    for rendered in result.files:
        if rendered.name == "answers.yaml":
            continue
        if str(root) in rendered.text:
            found.append(f"{rendered.name} names {root}")
        if rendered.name.endswith((".yaml", ".json")):
            data = json.loads(rendered.text) if rendered.name.endswith(".json") else yaml.safe_load(rendered.text)
            found += [
                f"{rendered.name}: {k}: {v}"
                for k, v in strings(data)
                if v.startswith("/") and k not in DEVICE_PATH_KEYS
            ]
        if rendered.executable:
            commands = [line for line in rendered.text.splitlines()[1:] if not line.lstrip().startswith("#")]
            found += [f"{rendered.name}: {m}" for line in commands for m in ABSOLUTE_WORD.findall(line)]
    return found


def test_every_brought_json_is_copied_and_referenced_inside_the_folder(
    brought: tuple[Path, list[tuple[dict[str, Any], str, Result]]],
) -> None:
    root, results = brought
    seen = set()
    for answers, name, result in results:
        assert result.recommendation.backend == "deepspeed", answers
        target = answers["target"]
        # The copy: the same content as the original, parsed.
        original = json.loads(Path(answers["deepspeed_config"]).read_text())
        assert canonical(parsed(result, "ds_config.json")) == canonical(original), answers
        assert file(result, "ds_config.json").text == json_document(original)
        # Referenced by its name in the folder, as the wizard's own JSON is.
        if target == "accelerate":
            assert (
                parsed(result, "accelerate_config.yaml")["deepspeed_config"]["deepspeed_config_file"]
                == "ds_config.json"
            )
            assert '--deepspeed_config_file "$here"/ds_config.json' in file(result, "launch.sh").text
        else:
            assert parsed(result, "axolotl.yaml")["deepspeed"] == "ds_config.json"
        assert outside_references(result, root) == [], answers
        # answers.yaml alone keeps the original (absolute) path: replaying it reads the original.
        assert parsed(result, "answers.yaml")["answers"]["deepspeed_config"] == answers["deepspeed_config"]
        seen.add((target, name, int(result.recommendation.settings["num_machines"]) > 1))
    assert len(results) > 100
    assert {(t, n, m) for t in ("accelerate", "axolotl") for n in BROUGHT for m in (False, True)} <= seen, seen


def test_a_brought_json_gets_keep_or_change_as_its_estimate_and_the_written_files_say(
    brought: tuple[Path, list[tuple[dict[str, Any], str, Result]]],
) -> None:
    """The panel's "Your JSON" line: "keep it" exactly where the JSON's layout fits the GPU and the
    host RAM; a change names the layout of the suggested file, which is written exactly then."""
    from collections import Counter

    from wizard.engine.advice import buckets_only_edit
    from wizard.engine.evaluate import run_layout_label
    from wizard.engine.json_fit import LEVERS, SUGGESTED_JSON, suggested_lever
    from wizard.engine.memory import STRATEGY_TITLES, to_gib
    from wizard.ui.console import verdict_lines, without_json
    from wizard.ui.speed_view import speed_table

    said: Counter[str] = Counter()
    for _answers, _name, result in brought[1]:
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        lines = dict(verdict_lines(rec, result.session.answers))
        est = rec.facts.estimates.get(strategy) if rec.facts.estimates else None
        if strategy not in LEVERS or est is None:
            assert "Your JSON" not in lines, lines
            continue
        verdict = lines["Your JSON"]
        assert verdict.startswith("keep it") is (est.fits and est.host_fits is not False), verdict
        lever = suggested_lever(strategy, rec.facts.estimates)
        written = SUGGESTED_JSON in {f.name for f in result.files}
        # Or, where the layout fits but its overlap_comm buffers take it past the usable line, the buckets alone.
        buckets = buckets_only_edit(rec.facts, strategy) is not None
        assert written is (lever is not None or buckets), (verdict, lever)
        assert not buckets or verdict.startswith("keep its layout, lower its buckets"), verdict
        if lever is not None:
            assert verdict.startswith("change it") and f"{SUGGESTED_JSON} ({STRATEGY_TITLES[lever]})" in verdict
            fits_host = rec.facts.estimates[lever].host_fits is not False
            # The suggested layout's own figures close the line, where it has a step band: after "fits by
            # this estimate:" where it fits, else as a sentence of their own.
            gib = f"about {to_gib(rec.facts.estimates[lever].total)} GiB per GPU"
            step = rec.facts.speeds.get(lever)
            joined = f"fits by this estimate: {gib}" in verdict
            apart = f". {SUGGESTED_JSON}'s layout: {gib}" in verdict
            assert joined is (step is not None and fits_host), verdict
            assert apart is (step is not None and not fits_host), verdict
            if step is None:
                assert verdict.endswith("fits, by this estimate") is fits_host, verdict
            # The step table holds every time against the suggested layout's, which reads 1.0x, the
            # JSON's own layout past the memory being one the run may never take.
            table = speed_table(rec)
            if step is not None and table is not None:
                text = " ".join(_plain(table).split())
                assert "x suggested" in text and "x chosen" not in text, text
                row = re.search(rf"│ {re.escape(run_layout_label(rec, lever))} +│ [^│]+│ [^│]+│ +(\S+) │", text)
                assert row is not None and row.group(1) == "1.0x", text
            # The wizard's own pick without the JSON, where it is the suggested layout, is said as that
            # (its figures are the Your JSON line's), never with a second copy of them.
            own = next((w for w in result.levers if w.change.startswith("your DeepSpeed JSON left out")), None)
            if own is not None and own.strategy == lever:
                line = without_json(result)
                assert line is not None and line[1].endswith(f"is the layout of {SUGGESTED_JSON}: {own.title}"), line
                said["same layout"] += 1
        elif (table := speed_table(rec)) is not None:
            assert "x suggested" not in _plain(table), verdict
        said[verdict.split(":")[0]] += 1
    assert said["keep it"] and said["change it"] and said["same layout"], said


def _plain(renderable: Any) -> str:
    """A renderable as a wide terminal prints it, without colour."""
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(renderable)
    return out.getvalue()


def test_the_outside_reference_check_can_fail(brought: tuple[Path, list[tuple[dict[str, Any], str, Result]]]) -> None:
    root, results = brought
    _, _, result = results[0]
    bad = result.files[0].text + f"\n# {root}/brought/zero3.json\n"
    broken = Result(result.session, result.recommendation, [type(result.files[0])(result.files[0].name, bad)])
    assert outside_references(broken, root)
    script = type(result.files[0])("launch.sh", "#!/usr/bin/env bash\nexec accelerate launch /etc/ds.json\n", True)
    assert outside_references(Result(result.session, result.recommendation, [script]), root)


# ---------------------------------------------------------------------------------------------
# The copy is checked like the wizard's own JSON, and written by the writer's rules
# ---------------------------------------------------------------------------------------------

SINGLE = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "H100",
    "gpus_per_node": 8,
    "num_nodes": 1,
    "model": "7B",
    "method": "full",
    "sequence_length": 2048,
    "micro_batch_size": 1,
}
TWO_MACHINES = {**SINGLE, "num_nodes": 2}


def test_a_problem_in_the_brought_json_names_the_original_file(tmp_path: Path) -> None:
    # A removed DeepSpeed feature: only the checks find it, and they find it in the copy.
    path = bring(tmp_path, "zero3", {**BROUGHT["zero3"], "amp": {"enabled": True}})
    with pytest.raises(DeepSpeedConfigError) as info:
        decide({**TWO_MACHINES, "deepspeed_config": path}, tmp_path / "out", write=True)
    assert info.value.message.startswith(f"{path}: amp: ") and "removed" in info.value.message
    assert "ds_config.json" not in info.value.message
    assert not (tmp_path / "out").exists()
    # A warning inside it is shown once, against the original too.
    path = bring(tmp_path, "zero3", {**BROUGHT["zero3"], "my_note": "x"})
    result = decide({**TWO_MACHINES, "deepspeed_config": path}, tmp_path / "out")
    notes = [w for w in result.warnings if "'my_note'" in w]
    assert len(notes) == 1 and notes[0].startswith(f"{path}: my_note: "), result.warnings


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_the_copy_follows_the_writers_rules(tmp_path: Path) -> None:
    out = tmp_path / "out"
    answers = {**TWO_MACHINES, "deepspeed_config": bring(tmp_path, "zero3")}
    first = decide(answers, out, write=True)
    assert {a.path.name: a.action for a in first.actions}["ds_config.json"] == "create"
    assert json.loads((out / "ds_config.json").read_text()) == BROUGHT["zero3"]
    assert (out / "ds_config.json").stat().st_mode & 0o777 == 0o644
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    # The same answers again: nothing changes.
    again = decide(answers, out, write=True)
    assert {a.action for a in again.actions} == {"unchanged"}
    # Other content in the brought JSON: refused without --force, nothing written.
    before = snapshot(out)
    changed = {**BROUGHT["zero3"], "zero_optimization": {"stage": 3, "overlap_comm": True}}
    refused = decide({**answers, "deepspeed_config": bring(tmp_path, "zero3", changed)}, out, write=True)
    assert [a.path.name for a in refused.conflicts] == ["ds_config.json"]
    assert snapshot(out) == before
    forced = decide({**answers, "deepspeed_config": bring(tmp_path, "zero3", changed)}, out, write=True, force=True)
    assert {a.path.name: a.action for a in forced.actions}["ds_config.json"] == "overwrite"
    assert json.loads((out / "ds_config.json").read_text()) == changed


def test_rebuilding_from_the_folders_own_json_keeps_it_as_it_is(tmp_path: Path) -> None:
    out = tmp_path / "out"
    decide({**SINGLE, "deepspeed_config": bring(tmp_path, "zero3")}, out, write=True)
    own = out / "ds_config.json"
    own.write_text(json.dumps(BROUGHT["zero3"], indent=4), encoding="utf-8")  # laid out by hand
    before = snapshot(out)
    # (--force: answers.yaml now names another JSON.)
    result = decide({**SINGLE, "deepspeed_config": str(own)}, out, write=True, force=True)
    actions = {a.path.name: a.action for a in result.actions}
    assert actions["ds_config.json"] == "unchanged" and actions["answers.yaml"] == "overwrite"
    assert snapshot(out)["ds_config.json"] == before["ds_config.json"]


# ---------------------------------------------------------------------------------------------
# The real tools, on a copy of the folder (as on another machine), from another directory
# ---------------------------------------------------------------------------------------------

TOOLS_CASES = {
    "accelerate_single": SINGLE,
    "accelerate_two_machines": TWO_MACHINES,
    "axolotl_two_machines": {**TWO_MACHINES, "target": "axolotl"},
}


@pytest.mark.tools
@pytest.mark.parametrize("case", sorted(TOOLS_CASES))
@pytest.mark.parametrize("kind", ["zero3", "zero2_extras"])
def test_the_real_tools_accept_the_copied_folder_on_another_machine(tmp_path: Path, case: str, kind: str) -> None:
    source = Path(bring(tmp_path, kind))
    answers = {**TOOLS_CASES[case], "deepspeed_config": str(source)}
    result = decide(answers, tmp_path / "out", write=True)
    world = int(result.recommendation.settings["num_processes"])
    machines = int(result.recommendation.settings["num_machines"])
    # The folder as another machine has it: copied elsewhere, without the original JSON.
    there = tmp_path / "other-machine" / "run"
    shutil.copytree(tmp_path / "out", there)
    shutil.rmtree(tmp_path / "out")
    source.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"MACHINE_RANK": "1", "NODE_RANK": "1", "MAIN_PROCESS_IP": "127.0.0.1"} if machines > 1 else {}
    args = ["train.py"] if answers["target"] == "accelerate" else []
    proc, calls = run_script(there / "launch.sh", tmp_path, *args, env=env, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    stage = BROUGHT[kind]["zero_optimization"]["stage"]
    deepspeed_parse(there / "ds_config.json", world_size=world)
    if answers["target"] == "accelerate":
        (call,) = calls
        assert call.argv[:2] == ["launch", "--config_file"] and call.argv[-1] == "train.py"
        # Exactly the arguments launch.sh gave, from the directory it was started in.
        summary = accelerate_dry_run(Path(call.argv[2]), cwd=elsewhere, extra_args=call.argv[3:-1])
        assert summary["launcher"] == "deepspeed" and int(summary["num_processes"]) == world
        assert summary["deepspeed_config"]["zero_optimization"]["stage"] == stage
    else:
        train = calls[-1]
        assert train.argv[:2] == ["train", "axolotl.yaml"] and Path(train.cwd) == there
        config = yaml.safe_load((there / "axolotl.yaml").read_text())
        assert json.loads((Path(train.cwd) / config["deepspeed"]).read_text()) == BROUGHT[kind]
        assert axolotl_validate(there / "axolotl.yaml", n_gpu=world)["deepspeed"] == "ds_config.json"


def test_unusual_content_is_copied_exactly(tmp_path: Path) -> None:
    """What JSON allows but the wizard never writes: the copy parses back to the same content."""
    text = (
        '{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto",'
        ' "x": {"lone": "\\ud800", "big": 1' + "0" * 80 + ', "tiny": 5e-324, "neg0": -0.0, "nan": NaN,'
        ' "deep": ' + '{"a": ' * 60 + "1" + "}" * 60 + ', "wide": [' + ", ".join(["0"] * 150_000) + "]}}"
    )  # "deep" stays within the 64-level limit; "wide" is what indenting would blow up
    path = tmp_path / "odd.json"
    path.write_text(text, encoding="utf-8")
    decide({**TWO_MACHINES, "deepspeed_config": str(path)}, tmp_path / "out", write=True)
    copy = (tmp_path / "out" / "ds_config.json").read_text(encoding="utf-8")
    assert canonical(json.loads(copy)) == canonical(json.loads(text))
    assert copy.isascii() and "\\ud800" in copy
    # Indented, this one would pass the 1 MiB the checks read: it is written on one line instead.
    assert len(json.dumps(json.loads(text), indent=2)) > 1024 * 1024
    assert copy.count("\n") == 1 and len(copy) < 1024 * 1024


@pytest.mark.parametrize("target", ["accelerate", "axolotl"])
def test_a_json_with_numbers_for_the_batch_decides_it(tmp_path: Path, target: str) -> None:
    # 32 = micro-batch 4 x accumulation 2 x 4 GPUs: the answers follow the JSON instead of
    # contradicting it with the wizard's own defaults.
    ds = tmp_path / "numbers.json"
    batch = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
    ds.write_text(json.dumps({**batch, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    answers = {
        "target": target,
        "hardware": "nvidia",
        "gpu_model": "H100",
        "gpus_per_node": 4,
        "model": "1B",
        "method": "full",
        "deepspeed_config": str(ds),
    }
    result = decide(answers, tmp_path / "out", write=True)
    assert result.session.answers["micro_batch_size"] == 4
    if target == "axolotl":
        cfg = parsed(result, "axolotl.yaml")
        assert (cfg["micro_batch_size"], cfg["gradient_accumulation_steps"]) == (4, 2)


@pytest.mark.tools
def test_the_real_tools_accept_a_json_with_numbers_for_the_batch(tmp_path: Path) -> None:
    ds = tmp_path / "numbers.json"
    batch = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
    ds.write_text(json.dumps({**batch, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    answers = {"hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 4, "model": "1B", "method": "full"}
    out = tmp_path / "axolotl"
    decide({**answers, "target": "axolotl", "deepspeed_config": str(ds)}, out, write=True)
    validated = axolotl_validate(out / "axolotl.yaml", n_gpu=4)
    assert (validated["micro_batch_size"], validated["gradient_accumulation_steps"]) == (4, 2)
    deepspeed_parse(out / "ds_config.json", world_size=4)


def test_a_json_without_accumulation_or_total_batch_gets_no_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Accelerate writes gradient_accumulation_steps 1 into a JSON that lacks it, and DeepSpeed
    # derives train_batch_size from micro batch x accumulation x world size: nothing to warn about.
    from wizard.cli import main

    ds = tmp_path / "ds.json"
    ds.write_text(
        json.dumps(
            {
                "zero_optimization": {"stage": 3},
                "bf16": {"enabled": "auto"},
                "train_micro_batch_size_per_gpu": "auto",
            }
        )
    )
    answers = tmp_path / "answers.yaml"
    answers.write_text(
        yaml.safe_dump(
            {
                "target": "accelerate",
                "hardware": "nvidia",
                "gpu_model": "A100",
                "gpus_per_node": 4,
                "model": "13B",
                "method": "full",
                "deepspeed_config": str(ds),
            }
        )
    )
    monkeypatch.setenv("COLUMNS", "80")
    code = main(["--answers", str(answers), "--dry-run", "--output-dir", str(tmp_path / "out")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "train_batch_size is missing" not in out and "gradient_accumulation_steps is missing" not in out
    assert "configured elsewhere" not in out
    # "auto" is no number of the JSON's: the micro-batch is the wizard's default, said as such.
    assert "your DeepSpeed JSON's train_micro_batch_size_per_gpu" not in out


def test_the_micro_batch_a_json_sets_is_credited_to_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A number the brought JSON sets is no default of the wizard's: the summary says whose it is."""
    from wizard.cli import main

    ds = tmp_path / "ds.json"
    batch = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}
    ds.write_text(json.dumps({**batch, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}))
    answers = tmp_path / "answers.yaml"
    base = {"target": "accelerate", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 4}
    answers.write_text(yaml.safe_dump({**base, "model": "1B", "method": "full", "deepspeed_config": str(ds)}))
    monkeypatch.setenv("COLUMNS", "80")
    code = main(["--answers", str(answers), "--dry-run", "--output-dir", str(tmp_path / "out")])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "micro_batch_size 4 (your DeepSpeed JSON's train_micro_batch_size_per_gpu)" in out, out


def test_a_json_without_any_batch_size_is_refused(tmp_path: Path) -> None:
    # Neither train_batch_size nor the micro batch: DeepSpeed asserts at start-up, so the wizard stops first.
    data = {"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}
    path = bring(tmp_path, "zero3", data)
    with pytest.raises(DeepSpeedConfigError) as info:
        decide({**SINGLE, "deepspeed_config": path}, tmp_path / "out")
    assert "train_micro_batch_size_per_gpu" in info.value.message and "both missing" in info.value.message


ZERO2_BUCKETS = {**AUTO_BATCH, "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2, "overlap_comm": True}}


def four_a100_13b(ds: Path, *, cpu_memory_gb: int, method: str) -> dict[str, Any]:
    """One machine of 4 x A100 40GB (a 13B model at 4,096 tokens, Accelerate) with the JSON at `ds` brought."""
    return {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 40GB", "gpus_per_node": 4,
        "cpu_memory_gb": cpu_memory_gb, "model": "13B", "method": method, "sequence_length": 4096,
        "deepspeed_config": str(ds),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("host", "gpus", "method"), [(256, 4, "full"), (512, 4, "full"), (256, 8, "full"), (256, 4, "lora")]
)
def test_a_brought_json_shows_the_wizards_own_pick_and_what_makes_it_fit(
    tmp_path: Path, host: int, gpus: int, method: str
) -> None:
    """Keep the JSON or switch: the lever "your DeepSpeed JSON left out" gives exactly the decision of the
    same answers without it; a JSON past the usable memory says so in Next, and every runner-up that does
    not fit names the JSON's precedence first."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(ZERO2_BUCKETS), encoding="utf-8")
    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A100 40GB", "gpus_per_node": gpus,
        "cpu_memory_gb": host, "model": "13B", "method": method, "sequence_length": 4096,
    }  # fmt: skip
    with_json = decide({**answers, "deepspeed_config": str(ds)}, tmp_path / "json", write=False)
    without = decide(answers, tmp_path / "plain", write=False)
    rec = with_json.recommendation
    lever = [w for w in with_json.levers if w.change == "your DeepSpeed JSON left out (no deepspeed_config)"]
    plain = without.recommendation
    if (plain.backend, plain.settings.get("strategy")) == (rec.backend, rec.settings.get("strategy")):
        assert not lever, lever  # the same layout: nothing to switch to
    else:
        assert len(lever) == 1, with_json.levers
        expected = "no backend fits" if plain.refused else str(plain.backend)
        assert (lever[0].backend or "no backend fits") == expected, (lever, plain.backend)
    chosen = rec.facts.estimates[str(rec.settings["strategy"])]
    for runner in rec.runner_ups:
        estimate = rec.facts.estimates.get(str(runner.strategy))
        if estimate is None or not estimate.fits or estimate.host_fits is False:
            assert runner.reason.startswith("You gave a DeepSpeed JSON, which only DeepSpeed can run"), runner.reason
    if not chosen.fits:
        # Some change makes the JSON itself fit, or the wizard's own pick is shown.
        assert with_json.levers, rec.because


def test_next_says_a_brought_json_that_does_not_fit_is_a_try(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files are written for a JSON run as written; the Next line says whether the estimate expects it to fit."""
    from wizard.cli import main

    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(ZERO2_BUCKETS), encoding="utf-8")
    # 13B full: past the whole GPU (it cannot start); 7B full: past the usable line only (a try); LoRA: fits.
    for model, method, verdict in (("13B", "full", "cannot"), ("7B", "full", "try"), ("13B", "lora", "fits")):
        answers = {**four_a100_13b(ds, cpu_memory_gb=256, method=method), "model": model}
        path = tmp_path / f"{model}{method}.yaml"
        path.write_text(yaml.safe_dump(answers), encoding="utf-8")
        code = main(["--answers", str(path), "--output-dir", str(tmp_path / f"{model}{method}")])
        printed = capsys.readouterr().out
        out = " ".join(printed.split())
        # Written either way; a JSON past the usable line exits 9, as its title says "does not fit by this estimate".
        assert code == (0 if verdict == "fits" else 9), out
        cannot = "Next: your JSON cannot run as written on these GPUs: it needs more than the GPU itself (see above)."
        assert (cannot in out) is (verdict == "cannot"), out
        told = "The other files run your JSON as written, which needs GPUs with at least"
        assert (told in out and "do not run launch.sh on these GPUs" in out) is (verdict == "cannot"), out
        if verdict == "cannot":
            # No launch command beside "do not run it": nothing under Next starts launch.sh.
            assert "/launch.sh YOUR_TRAINING_SCRIPT.py" not in out.split("Next: ", 1)[1], out
        assert next_says(out, "your JSON does not fit by this estimate (see above);") is (verdict == "try"), out
        assert ("to try yours anyway, run:" in out) is (verdict == "try"), out
        assert ("has the change the warning above proposes" in out) is (verdict == "try"), out
        assert out.count("Next:") + out.count("Next, in this order:") == 1
        # A set for other GPUs is not smoked here: after "do not run launch.sh on these GPUs" no test of it follows.
        assert ("backend-wizard smoke" in out) is (verdict != "cannot"), out
        if verdict == "cannot":
            # The first command is the check of the suggested JSON: run as printed, that JSON fits the GPU
            # (kept; or, with this run's host RAM short only by DeepSpeed's 1.5x allowance, worth a try).
            rerun = next(line.strip() for line in printed.splitlines() if line.strip().startswith("backend-wizard --"))
            code = main(shlex.split(rerun)[1:])
            again = " ".join(capsys.readouterr().out.split())
            assert code == 0 or "(host RAM short by this estimate)" in again, again
            assert "as written it cannot run" not in again, again
            # The suggested JSON is the wizard's edit, brought back: said as such, not as the user's own JSON.
            assert "This JSON: keep it: it fits as written" in again or "try it as written: it fits the GPU" in again
            assert "Your JSON:" not in again, again
            assert "This run brings a DeepSpeed JSON, ds_config.suggested.json (the" in again, again
            assert (Path(shlex.split(rerun)[-1]) / "launch.sh").is_file()


@pytest.mark.parametrize(
    ("zero", "method", "said"),
    [
        ({"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}, "full", True),
        ({"stage": 2, "overlap_comm": True}, "full", True),  # DeepSpeed's defaults are 5e8 each
        ({"stage": 2, "overlap_comm": True, "reduce_bucket_size": 5e7, "allgather_bucket_size": 5e7}, "full", False),
        ({"stage": 2, "overlap_comm": False}, "full", False),
        ({"stage": 2, "overlap_comm": True}, "lora", False),  # buckets no larger than the adapters' gradients
    ],
)
def test_overlap_comm_buckets_are_warned_about_where_they_would_take_most_of_the_room(
    tmp_path: Path, zero: dict[str, Any], method: str, said: bool
) -> None:
    """Invariant: a brought ZeRO-2 JSON that fits is warned about its overlap_comm buffers exactly where
    Transformers' 4.5 x the bucket sizes (16 bit, capped by the trained parameters) takes more than half
    of what the plan leaves of the GPU at its peak; the warning's figures are the estimate's own."""
    from wizard.engine.memory import spare_gib, to_gib, trainable_params

    ds = tmp_path / "ds.json"
    block = {**zero, "offload_optimizer": {"device": "cpu", "pin_memory": True}} if method == "full" else zero
    ds.write_text(json.dumps({**AUTO_BATCH, "bf16": {"enabled": "auto"}, "zero_optimization": block}), "utf-8")
    answers = four_a100_13b(ds, cpu_memory_gb=512, method=method)
    rec = decide(answers, tmp_path / "out").recommendation
    estimate = rec.facts.estimates[str(rec.settings["strategy"])]
    assert estimate.fits, rec.settings
    warned = [w for w in rec.warnings if w.startswith("your DeepSpeed JSON sets overlap_comm: true and")]
    assert bool(warned) is said, rec.warnings
    assert rec.facts.workload is not None
    elements = zero.get("reduce_bucket_size", 5e8) + zero.get("allgather_bucket_size", 5e8)
    buffers = to_gib(int(4.5 * 2 * min(elements, 2 * trainable_params(rec.facts.workload))))
    assert (zero["overlap_comm"] and buffers > spare_gib(estimate) / 2) is said, (buffers, spare_gib(estimate))
    if said:
        assert f"about {buffers} GiB here, against the {spare_gib(estimate)} GiB" in warned[0], warned[0]
        reduce = to_gib(int(2 * 2 * min(zero.get("reduce_bucket_size", 5e8), trainable_params(rec.facts.workload))))
        assert f"two reduce buffers of reduce_bucket_size elements, about {reduce} GiB in 16 bit" in warned[0]
        assert "Before the first launch, set both to 2e8" in warned[0]
        # Said as the JSON has them: written, or left at DeepSpeed's default.
        default = "reduce_bucket_size" not in zero and "allgather_bucket_size" not in zero
        assert ("at DeepSpeed's default 5e8 each" in warned[0]) is default, warned[0]


def test_the_wizards_own_zero_json_gets_the_same_bucket_warning_on_every_path(tmp_path: Path) -> None:
    """Invariant over the walk: a ZeRO-1/2 plan the wizard writes itself (overlap_comm on) gets buckets of 2e8 in
    its ds_config.json, and a warning saying why, exactly where DeepSpeed's default 5e8 buckets would crowd the GPU
    by the rule a brought JSON with those settings is warned by; elsewhere it keeps the defaults."""
    from helpers import decided_paths
    from wizard.engine.memory import spare_gib, to_gib, trainable_params

    checked = 0
    for answers, result in decided_paths(tmp_path, lambda a: not a.get("deepspeed_config")):
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        if rec.backend != "deepspeed" or strategy not in ("zero1", "zero2", "zero2_offload_optimizer"):
            continue
        estimate = rec.facts.estimates[strategy]
        assert rec.facts.workload is not None
        guide = to_gib(int(4.5 * 2 * min(1e9, 2 * trainable_params(rec.facts.workload))))
        warned = [w for w in rec.warnings if w.startswith("ds_config.json sets reduce_bucket_size and allgather")]
        crowded = estimate.fits and guide > spare_gib(estimate) / 2
        assert bool(warned) is crowded, (answers, warned)
        # The file itself: the smaller buckets exactly where the warning says it sets them, else DeepSpeed's defaults.
        zero = json.loads(file(result, "ds_config.json").text)["zero_optimization"]
        buckets = (zero.get("reduce_bucket_size"), zero.get("allgather_bucket_size"))
        assert buckets == ((200000000, 200000000) if crowded else (None, None)), (answers, zero)
        checked += 1
    assert checked


def test_a_brought_json_short_of_host_ram_says_so_in_the_title_memory_line_and_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A brought JSON whose offload fits the GPU but not the host RAM is flagged as a GPU shortfall is: in the
    panel's title, on its Memory line with the usable figure, and in Next, which calls the launch a try."""
    from wizard.cli import main
    from wizard.engine.memory import FIT_MARGIN, to_gib

    ds = tmp_path / "ds.json"
    offload = {"device": "cpu", "pin_memory": True}
    ds.write_text(json.dumps({**AUTO_BATCH, "zero_optimization": {"stage": 2, "offload_optimizer": offload}}))
    answers = four_a100_13b(ds, cpu_memory_gb=251, method="full")
    rec = decide(answers, tmp_path / "check").recommendation
    est = rec.facts.estimates[str(rec.settings["strategy"])]
    assert est.fits and est.host_fits is False, est
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(answers), encoding="utf-8")
    monkeypatch.setenv("COLUMNS", "80")
    code = main(["--answers", str(path), "--output-dir", str(tmp_path / "out")])
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the panel's borders out of the way
    assert code == 9  # written, but short of host RAM as written
    assert "(host RAM short by this estimate)" in out, out
    usable = to_gib(int(FIT_MARGIN * est.host_memory))
    assert f"GiB of host RAM per machine, more than the {usable} GiB usable there" in out, out
    assert next_says(out, "your JSON's offload needs more host RAM than this estimate allows"), out


@pytest.mark.parametrize("overlap", [True, False])
def test_the_edit_a_json_that_does_not_fit_is_given_names_its_buckets_too(tmp_path: Path, overlap: bool) -> None:
    """The fit warning's JSON edit keeps "its other keys as they are": where those keep overlap_comm with
    large buckets, the same warning says to lower them in that edit, not only once the edit is made."""
    ds = tmp_path / "ds.json"
    zero = {"stage": 2, "overlap_comm": overlap, "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8}
    ds.write_text(json.dumps({**AUTO_BATCH, "zero_optimization": zero}), encoding="utf-8")
    answers = four_a100_13b(ds, cpu_memory_gb=251, method="full")
    rec = decide(answers, tmp_path / "out").recommendation
    fit = [w for w in rec.warnings if w.startswith("by the wizard's estimate your DeepSpeed JSON")]
    assert len(fit) == 1, rec.warnings
    said = "Also lower reduce_bucket_size and allgather_bucket_size to 2e8" in fit[0]
    assert said is overlap, fit[0]


def test_the_copy_keeps_numbers_as_written(tmp_path: Path) -> None:
    """A bucket size written 5e8 is copied as the whole number 500000000 (not 500000000.0), a small
    float keeps its decimal point, and DeepSpeed reads the copy with the same values."""
    original = tmp_path / "ds.json"
    original.write_text(
        '{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",'
        ' "gradient_clipping": 1.0, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2,'
        ' "overlap_comm": true, "reduce_bucket_size": 5e8, "allgather_bucket_size": 2e8}}'
    )
    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "A100", "gpus_per_node": 4, "model": "7B",
        "method": "full", "deepspeed_config": str(original),
    }  # fmt: skip
    result = decide(answers, tmp_path / "out")
    text = file(result, "ds_config.json").text
    assert '"reduce_bucket_size": 500000000,' in text and '"allgather_bucket_size": 200000000' in text, text
    assert '"gradient_clipping": 1.0' in text and "500000000.0" not in text, text
    assert json.loads(text) == json.loads(original.read_text())


@pytest.mark.tools
@pytest.mark.parametrize(
    ("host", "gpus", "method", "written"),
    [(256, 4, "full", True), (512, 4, "full", True), (256, 8, "full", True), (512, 4, "full", False)],
)
def test_the_suggested_json_is_the_edit_and_fits_when_given_back(
    tmp_path: Path, host: int, gpus: int, method: str, written: bool
) -> None:
    """A brought JSON that does not fit gets ds_config.suggested.json: the user's keys with the proposed
    zero_optimization settings (and the buckets set to 2e8 where the warning says so, whether the JSON
    wrote them or left them at DeepSpeed's default), accepted by DeepSpeed's own parser; given back as
    deepspeed_config, it runs as the proposed layout, which fits the GPU (and the host RAM where any
    offload does), with no bucket warning left."""
    from wizard.engine.json_fit import LEVERS, SUGGESTED_JSON, suggested_lever

    ds = tmp_path / "ds.json"
    buckets = {"reduce_bucket_size": 5e8} if written else {}
    original = {**ZERO2_BUCKETS, "zero_optimization": {**ZERO2_BUCKETS["zero_optimization"], **buckets}}
    ds.write_text(json.dumps(original), encoding="utf-8")
    answers = {**four_a100_13b(ds, cpu_memory_gb=host, method=method), "gpus_per_node": gpus}
    out = tmp_path / "out"
    result = decide(answers, out, write=True)
    rec = result.recommendation
    lever = suggested_lever(str(rec.settings["strategy"]), rec.facts.estimates)
    assert lever is not None, rec.warnings
    suggested = json.loads((out / SUGGESTED_JSON).read_text())
    zero = suggested.pop("zero_optimization")
    assert suggested == {k: v for k, v in original.items() if k != "zero_optimization"}
    for key, value in LEVERS[lever].items():
        assert zero[key] == value, (key, zero)
    # A ZeRO-3 edit also makes saving gather one whole model, which the original JSON does not say.
    assert zero.get("stage3_gather_16bit_weights_on_model_save") is (True if LEVERS[lever]["stage"] == 3 else None)
    verb = "lower" if written else "set"
    lowered = any(
        SUGGESTED_JSON in w and f"{verb} reduce_bucket_size and allgather_bucket_size" in w for w in rec.warnings
    )
    # DeepSpeed's default buckets crowd a ZeRO-1/2 edit here; a ZeRO-3 one (taken for its room) has none to lower.
    assert lowered or written or lever.startswith("zero3"), rec.warnings
    assert (zero.get("reduce_bucket_size") == 200000000) is lowered, (zero, rec.warnings)
    assert (zero.get("allgather_bucket_size") == 200000000) is lowered, (zero, rec.warnings)
    deepspeed_parse(out / SUGGESTED_JSON, world_size=gpus)
    again = decide({**answers, "deepspeed_config": str(out / SUGGESTED_JSON)}, tmp_path / "again")
    chosen = again.recommendation.facts.estimates[str(again.recommendation.settings["strategy"])]
    assert again.recommendation.settings["strategy"] == lever
    assert chosen.fits, again.recommendation.warnings
    if lowered:
        assert not any("Before the first launch, set both" in w for w in again.recommendation.warnings)
    if any(est.fits and est.host_fits is not False for key, est in rec.facts.estimates.items() if key in LEVERS):
        assert chosen.host_fits is not False
        assert not (tmp_path / "again" / SUGGESTED_JSON).exists()
        assert (
            suggested_lever(str(again.recommendation.settings["strategy"]), again.recommendation.facts.estimates)
            is None
        )


def test_runner_ups_are_weighed_against_the_suggested_layout_where_the_json_does_not_fit(
    brought: tuple[Path, list[tuple[dict[str, Any], str, Result]]],
) -> None:
    """A runner-up set against the run names ds_config.suggested.json's layout and figures where the JSON as
    written does not fit (the one that can run), and the JSON's own layout where it fits."""
    from wizard.engine.json_fit import SUGGESTED_JSON, suggested_lever
    from wizard.engine.memory import to_gib

    weighed = 0
    for _answers, _name, result in brought[1]:
        rec = result.recommendation
        if rec.refused or not rec.facts.estimates:
            continue
        strategy = str(rec.settings.get("strategy"))
        lever = suggested_lever(strategy, rec.facts.estimates)
        for runner in rec.runner_ups:
            reason = " ".join(runner.reason.split())
            against = re.findall(r"against (\d+\.\d) GiB with (ds_config\.suggested\.json's [^,;(]+|[^,.;(]+)", reason)
            for figure, name in against:
                if lever is None:
                    assert SUGGESTED_JSON not in name, reason
                    continue
                if name.startswith(SUGGESTED_JSON):
                    weighed += 1
                    assert figure == f"{to_gib(rec.facts.estimates[lever].total)}", reason
                else:
                    # Never the JSON's own layout, which cannot run as written.
                    assert figure != f"{to_gib(rec.facts.estimates[strategy].total)}", reason
    assert weighed, "no runner-up was weighed against a suggested layout: the test shows nothing"


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize(("model", "gpus"), [("13B", 4), ("13B", 2), ("7B", 2), ("30B", 8), ("7B", 8)])
def test_the_fit_warning_takes_the_first_setting_with_room_and_names_the_lighter_one_it_passed_over(
    tmp_path: Path, stage: int, model: str, gpus: int, overlap: bool
) -> None:
    """The proposed edit is the first ZeRO setting that fits with its peak within the room the wizard keeps (70% of
    the usable memory), else the first that fits. Where a lighter one fits too, past that room, the warning names it
    with its own share and keys; where the edit itself has no room and a later ZeRO-3 one fits with less memory,
    that one is named instead; never both, and never a setting that does not fit. A JSON with overlap_comm on
    gets the passed-over ZeRO-1/2 setting's share with its buckets' buffers too (Transformers' guide's figure)."""
    from wizard.engine.advice import brought_buffers
    from wizard.engine.facts import TIGHT_SHARE
    from wizard.engine.json_fit import LEVERS, suggested_lever
    from wizard.engine.memory import STRATEGY_TITLES, sum_gib, to_gib

    ds = tmp_path / "ds.json"
    zero: dict[str, Any] = {"stage": stage}
    if overlap:
        zero.update(overlap_comm=True, reduce_bucket_size=5e8, allgather_bucket_size=5e8)
    ds.write_text(json.dumps({**AUTO_BATCH, "zero_optimization": zero}), encoding="utf-8")
    answers = {**four_a100_13b(ds, cpu_memory_gb=1024, method="full"), "model": model, "gpus_per_node": gpus}
    result = decide(answers, tmp_path / "out")
    estimates = result.recommendation.facts.estimates
    strategy = str(result.recommendation.settings["strategy"])
    lever = suggested_lever(strategy, estimates)
    said = " ".join(" ".join(result.warnings).split())
    order = list(LEVERS)
    runs = [
        k
        for k in order
        if k != strategy and (e := estimates.get(k)) is not None and e.fits and e.host_fits is not False
    ]
    roomy = [k for k in runs if estimates[k].peak <= TIGHT_SHARE * estimates[k].budget]
    mine = estimates[strategy]
    if mine.fits and mine.host_fits is not False:
        # The JSON as written fits: nothing proposed, nothing named.
        assert lever is None and "This edit leaves room to spare" not in said and "needs less GPU memory" not in said
        return
    assert lever == (roomy or runs or [None])[0] or not runs, (lever, runs)
    passed = re.search(
        r"This edit leaves room to spare\. (.+?)(?: \(it keeps your stage\))?, the lighter change, (?:fits but"
        r" without that room|does not): at its peak it comes to (\d+)% of the usable memory",
        said,
    )
    leaner = re.search(r"(.+?) needs less GPU memory \(about ([\d.]+) GiB per GPU\), room for a larger", said)
    earlier = [k for k in runs if lever is not None and order.index(k) < order.index(lever)]
    if earlier:
        assert passed is not None and leaner is None, said
        near = estimates[earlier[0]]
        assert passed.group(1).endswith(STRATEGY_TITLES[earlier[0]]), said
        assert passed.group(2) == f"{near.peak / near.budget * 100:.0f}", said
        assert near.peak > TIGHT_SHARE * near.budget
        extra = brought_buffers(result.recommendation.facts).get(earlier[0], 0)
        assert bool(extra) is (overlap and earlier[0] in ("zero1", "zero2", "zero2_offload_optimizer")), extra
        share = (near.high + extra) / near.budget
        basis = " through the step" if near.high == near.total and near.transient else ""
        with_buffers = (
            f"and with overlap_comm's buffers at your JSON's bucket sizes, about {sum_gib(near.high, extra)} GiB per"
            f" GPU{basis}, {share:.0%} of it, past the usable line"
            if share > 1
            else f", {share:.0%}{basis} with overlap_comm's buffers at your JSON's bucket sizes (about"
            f" {sum_gib(near.high, extra)} GiB per GPU)"
        )
        assert (with_buffers in said) is bool(extra), said
        # One verdict: "does not" exactly where the buffers take it past the usable line.
        assert ("the lighter change, does not:" in said) is (bool(extra) and share > 1), said
        if extra and share > 1:
            # What stands between it and a fit is the buckets: the way to lower them, with the figure it gives.
            from wizard.engine.advice import BUCKET_HINT, _overlap_guide_bytes

            low = _overlap_guide_bytes(2 * BUCKET_HINT, result.recommendation.facts.workload)
            low_share = (near.high + low) / near.budget
            assert (
                "with both overlap_comm buckets (reduce_bucket_size, allgather_bucket_size) at 2e8, the size the wizard"
                f" writes in a JSON of its own: its buffers then come to about {to_gib(low)} GiB, {low_share:.0%} of"
                f" the usable memory{basis} with them, {'still past' if low_share > 1 else 'within'} the usable line"
            ) in said, said
            at_peak = (near.peak + low) / near.budget
            # Weighed through the step: where the moment with the buffers passes the line, that is said too.
            assert (f"though {at_peak:.0%} at its peak" in said) is bool(basis and at_peak > 1 >= low_share), said
    else:
        assert passed is None, said
    if leaner is not None:
        assert lever is not None and estimates[lever].peak > TIGHT_SHARE * estimates[lever].budget, said
        named = next(k for k in order if STRATEGY_TITLES[k] == leaner.group(1).split(". ")[-1])
        assert named in runs and leaner.group(2) == f"{to_gib(estimates[named].total)}", said
    # Not an empty property: a 13B full fine-tune on four A100 40GB passes over ZeRO-2 + optim->CPU (85% at its peak).
    assert passed is not None or (model, gpus, stage) != ("13B", 4, 2), said


class OfferOnly:
    """A prompter for --ask-missing with every answer in the file: no question, the review as it is, no why-not;
    it records the offer to plan the suggested JSON and answers it with `take`."""

    def __init__(self, take: bool) -> None:
        self.take = take
        self.offered: list[str] = []

    def offer_detect(self, *, gpu_seen: bool = True) -> bool:
        return False

    def ask(self, step: Any) -> Any:
        return step.default

    def review(self, tree: Any, session: Any) -> str | None:
        return None

    def change_after_refusal(self) -> bool:
        return False

    def why_not(self, rec: Any, *, brief: bool = True) -> None:
        return None

    def offer_suggested(self, folder: str) -> bool:
        self.offered.append(folder)
        return self.take


@pytest.mark.parametrize(("model", "take"), [("13B", True), ("13B", False), ("7B", True)])
def test_an_interactive_run_offers_to_plan_the_suggested_json_where_the_brought_one_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], model: str, take: bool
) -> None:
    """Only where the brought JSON needs more than the GPU itself (13B full on 40 GB cards, not 7B, which is past
    the usable line only): the offer comes after the summary, and taken, it plans ds_config.suggested.json into
    OUT-suggested exactly as the command under Next does, whose set then runs that JSON; declined, nothing more."""
    import wizard.cli
    from wizard.cli import main

    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(ZERO2_BUCKETS), encoding="utf-8")
    answers = {**four_a100_13b(ds, cpu_memory_gb=512, method="full"), "model": model}
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(answers), encoding="utf-8")
    prompter = OfferOnly(take)
    monkeypatch.setattr(wizard.cli, "_prompter", lambda *args, **kwargs: prompter)
    monkeypatch.chdir(tmp_path)  # answers saved on an error go beside the run, never into the checkout
    out = tmp_path / "out"
    code = main(["--answers", str(path), "--ask-missing", "--output-dir", str(out)])
    printed = " ".join(capsys.readouterr().out.split())
    folder = tmp_path / "out-suggested"
    cannot = model == "13B"
    # Both JSONs are past the usable line as written (exit 9); taken, the suggested set's run fits (exit 0).
    assert code == (0 if cannot and take else 9), printed
    assert prompter.offered == ([str(folder)] if cannot else []), prompter.offered
    assert folder.exists() is (cannot and take), printed
    if cannot and take:
        # The second set runs the suggested JSON: its ds_config.json is that file's content, and it fits.
        assert json.loads((folder / "ds_config.json").read_text()) == json.loads(
            (out / "ds_config.suggested.json").read_text()
        )
        replay = yaml.safe_load((folder / "answers.yaml").read_text())["answers"]
        assert Path(replay["deepspeed_config"]).name == "ds_config.suggested.json", replay
        assert printed.count("Next:") + printed.count("Next, in this order:") == 2, printed
        assert "This JSON: keep it" in printed, printed


def test_keep_it_says_little_to_spare_where_the_buffers_take_the_json_near_the_usable_line(tmp_path: Path) -> None:
    """ "Keep it" for a JSON that fits is said with little to spare, and its share, exactly where the estimate and
    overlap_comm's buffers (Transformers' guide) come to 90% of the usable memory or more: the same sum the near-limit
    note gives; a JSON well within the line gets the plain verdict."""
    from wizard.engine.advice import overlap_buffer_bytes
    from wizard.ui.console import verdict_lines

    suggested = {
        **AUTO_BATCH,
        "bf16": {"enabled": "auto"},
        "zero_optimization": {
            "stage": 2, "overlap_comm": True, "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8,
        },
    }  # fmt: skip
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(suggested), encoding="utf-8")
    seen = set()
    for model, tokens in (("13B", 4096), ("13B", 2048), ("7B", 2048)):
        answers = {**four_a100_13b(ds, cpu_memory_gb=512, method="full"), "model": model, "sequence_length": tokens}
        result = decide(answers, tmp_path / f"{model}{tokens}")
        rec = result.recommendation
        est = rec.facts.estimates[str(rec.settings["strategy"])]
        buffers = overlap_buffer_bytes(str(rec.settings["strategy"]), rec.facts, brought=True)
        assert buffers > 0
        verdict = dict(verdict_lines(rec, result.session.answers))["Your JSON"]
        # The near-limit note's figure: the loss's moment where it is worth naming, else the total.
        high = (est.peak if est.transient >= est.budget // 20 else est.total) + buffers
        share = high / est.budget
        assert ("with little to spare" in verdict) is (0.9 <= share <= 1), (model, tokens, share, verdict)
        assert verdict.startswith("keep its layout, lower its buckets") is (share > 1), verdict
        if share >= 0.9:
            assert f"{share:.0%} of the usable memory" in verdict, verdict
            note = next(w for w in result.warnings if w.startswith("it fits, close to the usable memory"))
            assert f"{share:.0%} of the usable." in " ".join(note.split()), note  # one figure, both places
        seen.add(share >= 0.9)
    assert seen == {True, False}, seen
    # DeepSpeed's default 5e8 buckets on the same layout: past the usable line with them, so not "keep it".
    zero = {k: v for k, v in suggested["zero_optimization"].items() if not k.endswith("bucket_size")}
    ds.write_text(json.dumps({**suggested, "zero_optimization": zero}), encoding="utf-8")
    answers = {**four_a100_13b(ds, cpu_memory_gb=512, method="full"), "sequence_length": 4096}
    result = decide(answers, tmp_path / "defaults")
    verdict = dict(verdict_lines(result.recommendation, result.session.answers))["Your JSON"]
    assert verdict.startswith("keep its layout, lower its buckets: it fits by this estimate, but with"), verdict


class Scripted(OfferOnly):
    """OfferOnly for a fully interactive run: it declines to have this machine read and answers from `answers`
    (the question's default where it has none)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__(take=True)
        self.answers = answers

    def ask(self, step: Any) -> Any:
        return self.answers.get(step.question.id, step.default)


def test_the_suggested_set_planned_at_once_keeps_the_choice_not_to_read_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Told not to read this machine, an interactive run says its packages were not checked, and so does the
    suggested JSON's set it goes on to plan in the same session: one choice, held for both."""
    import wizard.cli
    from wizard.cli import main

    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps(ZERO2_BUCKETS), encoding="utf-8")
    answers = {**four_a100_13b(ds, cpu_memory_gb=512, method="full"), "model": "13B"}
    monkeypatch.setattr(wizard.cli, "_prompter", lambda *args, **kwargs: Scripted(answers))
    code = main(["--output-dir", str(tmp_path / "out")])
    printed = " ".join(capsys.readouterr().out.split())
    assert code == 0 and (tmp_path / "out-suggested" / "launch.sh").is_file(), printed
    assert printed.count("Next:") + printed.count("Next, in this order:") == 2, printed
    assert printed.count("none checked: reading this machine was declined") == 2, printed
    assert "missing on this machine" not in printed, printed


def _offloading_json(zero: dict[str, Any]) -> dict[str, Any]:
    """A DeepSpeed JSON with these zero_optimization keys and the optimizer state offloaded to the CPU."""
    return {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"},
        "zero_optimization": {**zero, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
    }


@pytest.mark.parametrize(
    ("zero", "overlap"),
    [
        ({"stage": 2, "overlap_comm": True}, True),
        ({"stage": 2, "overlap_comm": True, "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8}, True),
        ({"stage": 2, "overlap_comm": False}, False),
        ({"stage": 1, "overlap_comm": True}, True),
    ],
)
def test_the_tables_fits_column_counts_a_brought_jsons_overlap_buffers(
    tmp_path: Path, zero: dict[str, Any], overlap: bool
) -> None:
    """A ZeRO-1/2 row the brought JSON could run as, within the usable line only without its overlap_comm buffers,
    is marked 'buffers' in the short table, exactly where the buffers (the near-limit note's figure) take it past;
    without overlap_comm no row is."""
    import io

    from rich.console import Console

    from helpers import tree
    from wizard.engine.advice import brought_buffers
    from wizard.ui.console import print_result

    data = _offloading_json(zero)
    answers = {**FOUR_A100_40GB_13B_FULL, "deepspeed_config": bring(tmp_path, "ds.json", data)}
    result = decide(answers, tmp_path / "out")
    rec = result.recommendation
    buffers = brought_buffers(rec.facts)
    assert bool(buffers) is overlap
    out = io.StringIO()
    print_result(Console(file=out, width=100), tree(), result, dry_run=True)
    rows = {
        cells[0]: cells[-1]
        for line in out.getvalue().splitlines()
        if line.startswith("│") and len(cells := [c.strip() for c in line.strip("│").split("│")]) > 2
    }
    marked = 0
    for key, est in rec.facts.estimates.items():
        if est.label not in rows or not est.fits:
            continue
        past = key in buffers and est.high + buffers[key] > est.budget
        assert (rows[est.label] == "buffers") is past, (key, rows[est.label])
        marked += past
    # DeepSpeed's default buckets take the stage-2 offload row past the 32 GiB usable here; 2e8 each do not.
    assert marked == (1 if overlap and "reduce_bucket_size" not in zero else 0), rows
    said = " ".join(out.getvalue().split())
    assert (
        "fits 'buffers': past the usable line with the overlap_comm buffers at your JSON's bucket sizes" in said
    ) is bool(marked)


def test_a_json_past_the_line_by_its_buckets_alone_gets_them_lowered_in_a_suggested_json(tmp_path: Path) -> None:
    """A brought ZeRO-2 JSON that fits by the estimate but whose overlap_comm buffers take it past the usable line:
    ds_config.suggested.json is written, the same JSON with the two buckets at 2e8 and nothing else changed; the
    overlap_comm note and Next name it; brought back, it needs no further edit and no suggested JSON is written."""
    from wizard.engine.advice import BUCKET_HINT, buckets_only_edit

    data = _offloading_json({"stage": 2, "overlap_comm": True})
    answers = {**FOUR_A100_40GB_13B_FULL, "deepspeed_config": bring(tmp_path, "ds.json", data)}
    result = decide(answers, tmp_path / "out", write=True)
    rec = result.recommendation
    assert buckets_only_edit(rec.facts, str(rec.settings["strategy"])) == int(BUCKET_HINT)
    suggested = parsed(result, "ds_config.suggested.json")
    zero = dict(suggested["zero_optimization"])
    assert zero.pop("reduce_bucket_size") == zero.pop("allgather_bucket_size") == int(BUCKET_HINT)
    assert {**suggested, "zero_optimization": zero} == data
    note = next(w for w in result.warnings if w.startswith("your DeepSpeed JSON sets overlap_comm"))
    assert "ds_config.suggested.json, written beside the other files, is your JSON with that change" in note
    import io

    from rich.console import Console

    from helpers import tree
    from wizard.ui.console import print_result

    out = io.StringIO()
    print_result(Console(file=out, width=200), tree(), result, dry_run=False)
    said = " ".join(out.getvalue().split())
    assert next_says(said, "your JSON's overlap_comm buffers take it past the usable line (see above):"), said[-600:]
    assert f"--set deepspeed_config={tmp_path / 'out' / 'ds_config.suggested.json'}" in said
    again = decide({**answers, "deepspeed_config": str(tmp_path / "out" / "ds_config.suggested.json")}, tmp_path / "2")
    assert buckets_only_edit(again.recommendation.facts, str(again.recommendation.settings["strategy"])) is None
    assert "ds_config.suggested.json" not in {f.name for f in again.files}
    # Without overlap_comm there are no buffers to lower: no suggested JSON.
    quiet = {**data, "zero_optimization": {**data["zero_optimization"], "overlap_comm": False}}
    plain = decide({**answers, "deepspeed_config": bring(tmp_path, "quiet", quiet)}, tmp_path / "3")
    assert "ds_config.suggested.json" not in {f.name for f in plain.files}
