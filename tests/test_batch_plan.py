"""Batch planning: global_batch_size = micro-batch x accumulation x data-parallel GPUs, exactly, in the files.

The properties run over every decided path of the walk (tests/paths.py): without a global batch
the files split it as they always did; with one, the written files multiply back to it, and a
micro-batch the wizard picks is the largest power of two that divides and fits. End to end
through the CLI: 1, 2 and 8 GPUs and two machines, parsed from the written files, and the bad
values refused in one line (exit 2).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import decide, decided_paths, file, parsed
from wizard.app import Result
from wizard.cli import main
from wizard.engine.facts import TIGHT_SHARE
from wizard.engine.memory import GIB, estimate
from wizard.errors import WizardError

GLOBAL = "global_batch_size"


def data_parallel(result: Result) -> int:
    """The GPUs that see different sequences, from the decided settings (not the answers)."""
    settings = result.recommendation.settings
    group = math.prod(int(settings.get(f"{axis}_size") or 1) for axis in ("tp", "cp", "sp", "pp"))
    return int(settings["num_processes"]) // group


def saved_answers(result: Result) -> dict[str, Any]:
    """The answers.yaml the run writes, parsed."""
    return dict(yaml.safe_load(file(result, "answers.yaml").text)["answers"])


def written_split(result: Result) -> tuple[int, int] | None:
    """(micro-batch, accumulation) as the written files state them, or None where only the script sets them."""
    names = {f.name for f in result.files}
    if "axolotl.yaml" in names:
        data = parsed(result, "axolotl.yaml")
        return int(data["micro_batch_size"]), int(data["gradient_accumulation_steps"])
    config = parsed(result, "accelerate_config.yaml")
    if config.get("distributed_type") == "MEGATRON_LM":
        return int(result.session.answers["micro_batch_size"]), int(
            config["megatron_lm_config"]["megatron_lm_num_micro_batches"]
        )
    header = re.search(
        # "pairs" for DPO, whose batch counts preference pairs.
        r"Global batch: \d+ (?:sequences?|pairs?) per optimizer step = (\d+) (?:per \w+|on the Mac) x (\d+)"
        r" accumulation",
        " ".join(line.lstrip("# ") for line in file(result, "accelerate_config.yaml").text.splitlines()),
    )
    if header is not None:
        return int(header.group(1)), int(header.group(2))
    return None


def test_without_a_global_batch_the_files_split_it_as_before(tmp_path: Path) -> None:
    """The default global batch is the files' own micro x accumulation x data parallel, and nothing is custom."""
    checked = 0
    for answers, result in decided_paths(tmp_path):
        assert GLOBAL not in answers
        plan = result.recommendation.facts.batch
        assert plan is not None and not plan.custom, answers
        dp = data_parallel(result)
        assert plan.data_parallel == dp, answers
        assert saved_answers(result)[GLOBAL] == plan.global_batch == plan.micro * plan.accumulation * dp, answers
        split = written_split(result)
        if split is not None:
            assert split == (plan.micro, plan.accumulation), answers
        target, cp = answers["target"], int(result.recommendation.settings.get("cp_size") or 1)
        micro = int(result.session.answers["micro_batch_size"])
        if target == "axolotl" and "deepspeed_config" not in answers:
            # Axolotl's YAML always had 4 steps (CP: one sequence per GPU, 4 x the micro-batch steps).
            assert split == ((1, 4 * micro) if cp > 1 else (micro, 4)), answers
        if target == "accelerate" and result.recommendation.settings.get("pp_size") in (None, 1):
            assert plan.accumulation == 1 and "Global batch:" not in file(result, "accelerate_config.yaml").text
        checked += 1
    assert checked > 500


def _fits(result: Result, micro: int) -> bool:
    """Whether the decided layout's estimate fits with this micro-batch with room: its peak within 70% of the
    usable memory, where the wizard does not warn (GPU and known host RAM)."""
    rec = result.recommendation
    fitted = rec.facts.estimates[str(rec.settings["strategy"])]
    assert rec.facts.workload is not None
    host = (
        None
        if fitted.host_memory is None or result.session.answers.get("offload") == "nvme"
        else fitted.host_memory / GIB
    )
    trial = estimate(
        replace(rec.facts.workload, micro_batch_size=micro), fitted.strategy, fitted.gpu_memory / GIB, host
    )
    return trial.fits and trial.peak <= TIGHT_SHARE * trial.budget and trial.host_fits is not False


def _same_backend(answers: dict[str, Any], result: Result, micro: int, folder: Path) -> bool:
    other = decide({**answers, "micro_batch_size": micro}, folder)
    mine = result.recommendation
    return (other.recommendation.backend, other.recommendation.settings.get("strategy")) == (
        mine.backend,
        mine.settings.get("strategy"),
    )


def test_a_given_global_batch_is_exact_and_the_micro_batch_the_largest_that_divides_and_fits(tmp_path: Path) -> None:
    """On 1, 2, 8 GPUs and 2 machines: files multiply back to the global batch; the picked micro is the largest
    that fits with room (no near-limit warning for the wizard's own pick)."""
    checked = 0
    for answers, default in decided_paths(tmp_path):
        if default.recommendation.facts.batch is None:
            continue
        dp = default.recommendation.facts.batch.data_parallel
        world = int(default.recommendation.settings["num_processes"])
        if world not in (1, 2, 8, 16) or answers.get("num_nodes", 1) not in (1, 2):
            continue
        # 24 per data-parallel GPU: powers of two up to 8 divide it, 16 does not.
        given = {k: v for k, v in answers.items() if k != "micro_batch_size"}
        given[GLOBAL] = 24 * dp
        try:
            result = decide(given, tmp_path / "out")
        except WizardError as error:  # only a brought JSON's own micro-batch can leave no whole split
            raise AssertionError((given, error.message)) from None
        if result.recommendation.refused:
            continue
        plan = result.recommendation.facts.batch
        assert plan is not None and plan.problem is None, given
        assert plan.data_parallel == data_parallel(result), given
        assert plan.micro * plan.accumulation * plan.data_parallel == 24 * dp, given
        split = written_split(result)
        assert split == (plan.micro, plan.accumulation), (given, split)
        assert saved_answers(result)[GLOBAL] == 24 * dp
        # The step time counts the planned accumulation (in micro-batches of the answered size).
        micro = int(result.session.answers["micro_batch_size"])
        assert result.recommendation.facts.accumulation * micro * dp == 24 * dp, given
        for step in result.recommendation.facts.speeds.values():
            assert step.accumulation == result.recommendation.facts.accumulation
        cp_axolotl = (
            given["target"] == "axolotl"
            and plan.micro == 1
            and (result.recommendation.settings.get("cp_size") or 1) > 1
        )
        if not cp_axolotl and result.recommendation.facts.estimates and result.recommendation.settings.get("strategy"):
            assert 24 % micro == 0 and micro & (micro - 1) == 0, (given, micro)
            if micro > 1:
                assert _fits(result, micro), (given, micro)
            bigger = 2 * micro
            assert (
                24 % bigger or not _fits(result, bigger) or not _same_backend(given, result, bigger, tmp_path / "o")
            ), (
                given,
                micro,
            )
        checked += 1
    assert checked > 100


def test_a_given_micro_batch_is_kept_and_only_the_accumulation_computed(tmp_path: Path) -> None:
    """A micro-batch answer stays (Axolotl's CP: one sequence per GPU); the accumulation makes up the rest."""
    checked = 0
    for answers, default in decided_paths(tmp_path, lambda a: "deepspeed_config" not in a)[::4]:
        world = int(default.recommendation.settings["num_processes"])
        total = 2 * 3 * world  # a multiple of 2 x any data-parallel size
        result = decide({**answers, "micro_batch_size": 2, GLOBAL: total}, tmp_path / "out")
        if result.recommendation.refused:
            continue
        dp = data_parallel(result)
        cp = int(result.recommendation.settings.get("cp_size") or 1)
        plan = result.recommendation.facts.batch
        assert plan is not None and plan.global_batch == total
        expected = (1, total // dp) if answers["target"] == "axolotl" and cp > 1 else (2, total // (2 * dp))
        assert (plan.micro, plan.accumulation) == expected, answers
        split = written_split(result)
        assert split is None or split == expected, answers
        checked += 1
    assert checked > 100


def _cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], answers: dict[str, Any], *args: str) -> tuple[int, str]:
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(answers), encoding="utf-8")
    code = main(["--answers", str(path), "--output-dir", str(tmp_path / "out"), "--force", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


BASE = {"target": "axolotl", "hardware": "nvidia", "gpu_model": "H100", "model": "1.3B", "method": "lora"}


@pytest.mark.parametrize(("gpus", "nodes"), [(1, 1), (2, 1), (8, 1), (8, 2)])
def test_cli_writes_the_global_batch_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gpus: int, nodes: int
) -> None:
    dp = gpus * nodes
    code, _ = _cli(tmp_path, capsys, {**BASE, "gpus_per_node": gpus, "num_nodes": nodes, GLOBAL: 128})
    assert code == 0
    data = yaml.safe_load((tmp_path / "out" / "axolotl.yaml").read_text())
    assert data["micro_batch_size"] * data["gradient_accumulation_steps"] * dp == 128
    code, out = _cli(
        tmp_path, capsys, {**BASE, "gpus_per_node": gpus, "num_nodes": nodes, GLOBAL: 128}, "--output", "json"
    )
    batch = json.loads(out)["batch"]
    assert batch["global"] == 128 == batch["micro"] * batch["accumulation"] * batch["data_parallel"]
    assert batch["data_parallel"] == dp and batch["micro"] == data["micro_batch_size"]


def test_cli_accelerate_names_what_to_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = {**BASE, "target": "accelerate", "gpus_per_node": 4, "micro_batch_size": 2, GLOBAL: 64}
    code, out = _cli(tmp_path, capsys, answers)
    assert code == 0
    flat = " ".join(out.split())
    assert "64 sequences per optimizer step = 2 per GPU x 8 accumulation x 4 GPUs" in flat
    assert "DataLoader(batch_size=2)" in flat and "Accelerator(gradient_accumulation_steps=8)" in flat
    header = " ".join((tmp_path / "out" / "accelerate_config.yaml").read_text().replace("#", " ").split())
    assert "Accelerator(gradient_accumulation_steps=8)" in header


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        (0, ["global_batch_size", "at least 1"]),
        (100, ["global_batch_size", "100", "micro-batch 2 x 8 data-parallel GPUs = 16", "nearest: 96 or 112"]),
        (8, ["global_batch_size", "8", "nearest: 16"]),
    ],
)
def test_cli_refuses_a_global_batch_that_cannot_be_exact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: int, fragments: list[str]
) -> None:
    answers = {**BASE, "gpus_per_node": 8, "micro_batch_size": 2, GLOBAL: value}
    code, out = _cli(tmp_path, capsys, answers)
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in out, out
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert not (tmp_path / "out" / "axolotl.yaml").exists()


@pytest.mark.parametrize(("micro_in_file", "named"), [(False, True), (True, False)])
def test_a_micro_batch_from_set_is_named_beside_the_files_global_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], micro_in_file: bool, named: bool
) -> None:
    # The value typed on the command line, not only the file's, is what the message names.
    answers = {**BASE, "gpus_per_node": 4, GLOBAL: 64, **({"micro_batch_size": 3} if micro_in_file else {})}
    code, out = _cli(tmp_path, capsys, answers, *(() if micro_in_file else ("--set", "micro_batch_size=3")))
    line = " ".join(out.split())
    assert code == 2 and line.startswith("error: answers file: global_batch_size: 64 is not allowed"), out
    assert "micro-batch 3 x 4 data-parallel GPUs = 12" in line and "nearest: 60 or 72" in line
    assert ("micro_batch_size 3 is from --set: change either" in line) is named, line


def test_answers_yaml_replays_to_the_same_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _cli(tmp_path, capsys, {**BASE, "gpus_per_node": 2, GLOBAL: 48})
    assert code == 0
    first = {p.name: p.read_text() for p in (tmp_path / "out").iterdir()}
    saved = yaml.safe_load(first["answers.yaml"])["answers"]
    assert saved[GLOBAL] == 48
    code = main(["--answers", str(tmp_path / "out" / "answers.yaml"), "--output-dir", str(tmp_path / "again")])
    capsys.readouterr()
    assert code == 0
    again = {p.name: p.read_text() for p in (tmp_path / "again").iterdir()}
    assert {k: v for k, v in again.items() if k != "answers.yaml"} == {
        k: v for k, v in first.items() if k != "answers.yaml"
    }


def test_a_brought_json_with_numbers_decides_its_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A DeepSpeed JSON's numeric accumulation and micro-batch stay; a global batch must agree with them."""
    ds = tmp_path / "ds.json"
    ds.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": 2,
                "gradient_accumulation_steps": 4,
                "bf16": {"enabled": "auto"},
                "zero_optimization": {"stage": 2},
            }
        )
    )
    answers = {**BASE, "target": "accelerate", "gpus_per_node": 4, "deepspeed_config": str(ds)}
    code, out = _cli(tmp_path, capsys, {**answers, GLOBAL: 64})
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "gradient_accumulation_steps 4" in lines[0] and "give 32" in lines[0]
    code, out = _cli(tmp_path, capsys, {**answers, GLOBAL: 32}, "--output", "json")
    assert code == 0
    assert json.loads(out)["batch"] == {"global": 32, "micro": 2, "accumulation": 4, "data_parallel": 4}


def test_a_micro_batch_of_one_picked_for_want_of_room_is_not_called_the_largest_that_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two RTX 4090s, a 7B LoRA at 4,096 tokens: even one sequence per GPU is near the limit, so the
    # wizard's micro-batch of 1 is what is left, not one that "fits with room".
    answers = {
        "target": "axolotl",
        "hardware": "nvidia",
        "gpu_model": "RTX 4090",
        "gpus_per_node": 2,
        "model": "mistral-7b",
        "method": "lora",
        "sequence_length": 4096,
        GLOBAL: 16,
    }
    code, out = _cli(tmp_path, capsys, answers, "--defaults", "--dry-run")
    flat = " ".join(out.split())
    assert code == 0, out
    # The short summary in a few words; --explain says why no larger one was taken.
    said = "micro_batch_size 1 (the smallest; a larger one is taken only where its peak stays within 70% of the usable"
    assert said in flat and "the largest" not in flat, flat
    code, out = _cli(tmp_path, capsys, answers, "--defaults", "--dry-run", "--explain")
    flat = " ".join(out.split())
    assert code == 0, out
    assert (
        "micro_batch_size 1 (the smallest; the wizard takes a larger power of two that divides global_batch_size 16"
        " only where its peak stays within 70% of the usable memory, and none does here)" in flat
    )
    assert "the largest power of two" not in flat
    code, out = _cli(
        tmp_path, capsys, {**answers, "model": "1B", "sequence_length": 512}, "--defaults", "--dry-run", "--explain"
    )
    flat = " ".join(out.split())
    assert re.search(r"micro_batch_size (\d+) \(the largest power of two that divides global_batch_size 16", flat), flat
    # estimate's Assumed list says the same of a 1 it was left with.
    path = tmp_path / "estimate.yaml"
    path.write_text(yaml.safe_dump(answers), encoding="utf-8")
    assert main(["estimate", "--answers", str(path)]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "micro_batch_size: 1 (the smallest; no larger power of two that divides global_batch_size 16 fits" in flat
    assert "the largest power of two" not in flat


def test_a_micro_batch_the_wizard_picked_is_not_saved_so_a_replay_weighs_the_same_levers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One A100, a 13B full fine-tune offloaded, a global batch of 32 and no micro-batch: the wizard
    # picks one. answers.yaml holds the user's answers; replayed, it picks the same one again, writes
    # the same files and shows the same levers as the first run.
    answers = {
        "target": "accelerate",
        "hardware": "nvidia",
        "gpu_model": "A100 80GB",
        "gpus_per_node": 1,
        "cpu_memory_gb": 512,
        "model": "llama-2-13b",
        "method": "full",
        "sequence_length": 2048,
        GLOBAL: 32,
    }
    code, first = _cli(tmp_path, capsys, answers, "--defaults")
    assert code == 0, first
    saved = yaml.safe_load((tmp_path / "out" / "answers.yaml").read_text())["answers"]
    assert "micro_batch_size" not in saved and saved[GLOBAL] == 32
    files = {p.name: p.read_text() for p in (tmp_path / "out").iterdir() if p.name != "answers.yaml"}
    code = main(["--answers", str(tmp_path / "out" / "answers.yaml"), "--output-dir", str(tmp_path / "again")])
    again = capsys.readouterr().out
    assert code == 0
    assert {p.name: p.read_text() for p in (tmp_path / "again").iterdir() if p.name != "answers.yaml"} == files

    def levers(out: str) -> str:
        lists = re.split(r"To get a different answer|To give it room at its peak", out)
        return " ".join(lists[1].split("Before the first launch")[0].split())

    assert levers(again) == levers(first)
    # A micro-batch the user gives is an answer, and stays.
    code, _ = _cli(tmp_path, capsys, {**answers, "micro_batch_size": 2}, "--defaults")
    assert yaml.safe_load((tmp_path / "out" / "answers.yaml").read_text())["answers"]["micro_batch_size"] == 2


PLUGIN = "GradientAccumulationPlugin(num_steps={n}, sync_each_batch=True)"


def test_fsdp2_accumulation_syncs_each_micro_batch_as_the_estimate_assumes(tmp_path: Path) -> None:
    """Accelerate's accumulate() turns FSDP2's gradient sync off between optimizer steps unless
    sync_each_batch is set, and every GPU then keeps whole gradients the estimate counts sharded.
    Over every path with a global batch that needs accumulation: an FSDP2 run's instructions (and
    its snippet) name the plugin with sync_each_batch=True; no other backend's do."""
    from wizard.engine.batch import batch_where

    named = plain = 0
    runs = []
    for answers, result in decided_paths(tmp_path):
        if answers.get("target") != "accelerate" or result.recommendation.refused:
            continue
        runs.append((answers, result))
    extra = {**BASE, "target": "accelerate", "gpus_per_node": 4, "model": "8B", "method": "full", GLOBAL: 64}
    ddp = {**BASE, "target": "accelerate", "gpus_per_node": 4, "micro_batch_size": 2, GLOBAL: 64}
    runs += [(extra, decide(extra, tmp_path / "fsdp2")), (ddp, decide(ddp, tmp_path / "ddp"))]
    for answers, result in runs:
        rec = result.recommendation
        plan = rec.facts.batch
        if plan is None or plan.accumulation <= 1 or answers.get("objective") == "dpo" or answers.get("megatron"):
            continue
        fsdp = rec.settings.get("backend") == "fsdp2"
        where = batch_where(plan, "accelerate", False, rec.traits.deepspeed_json, fsdp=fsdp)
        plugin = PLUGIN.format(n=plan.accumulation)
        assert (plugin in where) is fsdp, (answers, where)
        assert ("Accelerator(gradient_accumulation_steps=" in where) is not fsdp, where
        if plan.custom:
            header = " ".join(file(result, "accelerate_config.yaml").text.replace("#", " ").split())
            assert (plugin in header) is fsdp, (answers, header)
        snippet = next((f.text for f in result.files if f.name == "train_snippet.py"), None)
        if snippet is not None and plan.custom:
            assert ("sync_each_batch=True" in snippet) is fsdp, answers
        named += fsdp
        plain += not fsdp
    assert named and plain, (named, plain)


@pytest.mark.tools
def test_the_named_plugin_is_accelerates_own_and_turns_the_sync_on() -> None:
    """The call the instructions name, run with the real Accelerate: accumulate() then keeps the
    gradient sync on for every micro-batch (Accelerator.accumulate reads sync_each_batch)."""
    from realtools import require_tool

    require_tool("accelerate")
    code = (
        "from accelerate import Accelerator\n"
        "from accelerate.utils import GradientAccumulationPlugin\n"
        f"plugin = {PLUGIN.format(n=4)}\n"
        "accelerator = Accelerator(gradient_accumulation_plugin=plugin, cpu=True)\n"
        "print(accelerator.gradient_accumulation_steps, accelerator.gradient_state.plugin_kwargs['sync_each_batch'])\n"
    )
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["4", "True"], proc.stdout
