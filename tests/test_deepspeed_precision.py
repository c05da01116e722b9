"""A brought DeepSpeed JSON trains in the mixed precision the wizard reports.

Accelerate fills the JSON's bf16/fp16 "enabled": "auto" from its own mixed precision
(``DeepSpeedPlugin.set_mixed_precision``), which defaults to "no" (fp32) and may not sit in the
YAML beside a ``deepspeed_config_file``; so launch.sh passes ``--mixed_precision``. For Axolotl the
bf16/fp16 keys do the same through Transformers' Trainer. Every combination of the two switches
(true, false, "auto", absent) on a GPU with bf16 and one without is decided and rendered here,
resolved by the real tools (``tools``), and a real ``accelerate launch`` of the generated launch.sh
prints the dtype DeepSpeed's engine resolved (``launch``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_real_tools import launch_args

from helpers import decide, file, parsed
from realtools import (
    TINY_TRAIN,
    TINY_TRAIN_MARKER,
    accelerate_deepspeed_precision,
    require_tool,
    tool_env,
    trainer_deepspeed_precision,
)
from wizard.checks import check_config
from wizard.errors import DeepSpeedConfigError

SWITCHES = ("true", "false", "auto", "absent")
GPUS = {"H100": 80, "V100": 32}  # with bf16, without
TARGETS = ("accelerate", "axolotl")
# Every combination the wizard accepts (both switches true, or bf16 true on a V100, are refused).
COMBOS = [
    (bf16, fp16, gpu)
    for bf16 in SWITCHES
    for fp16 in SWITCHES
    for gpu in GPUS
    if not (bf16 == fp16 == "true") and not (bf16 == "true" and gpu == "V100")
]


def brought_json(folder: Path, bf16: str, fp16: str) -> str:
    """A ZeRO-2 JSON with "auto" batch sizes and the given bf16/fp16 switches ("absent": no block)."""
    data: dict[str, Any] = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "zero_optimization": {"stage": 2},
    }
    for name, switch in (("bf16", bf16), ("fp16", fp16)):
        if switch != "absent":
            data[name] = {"enabled": {"true": True, "false": False, "auto": "auto"}[switch]}
    path = folder / f"ds_{bf16}_{fp16}.json"
    path.write_text(json.dumps(data))
    return str(path)


def answers(target: str, gpu: str, ds: str, gpus: int = 2) -> dict[str, Any]:
    return {
        "target": target,
        "hardware": "nvidia",
        "gpu_model": gpu,
        "gpu_memory_gb": GPUS[gpu],
        "gpus_per_node": gpus,
        "model": "1B",
        "method": "full",
        "sequence_length": 2048,
        "micro_batch_size": 1,
        "deepspeed_config": ds,
    }


def axolotl_precision(cfg: dict[str, Any]) -> str:
    """The mixed precision Axolotl exports for explicit bf16/fp16 keys (its prepare_optim_env)."""
    return "bf16" if cfg.get("bf16") is True else ("fp16" if cfg.get("fp16") is True else "no")


# (bf16 switch, fp16 switch, GPU) -> what the run trains in: one case per rule of the resolution.
EXPECTED = {
    ("auto", "absent", "H100"): "bf16",  # "auto" takes the GPU's precision
    ("auto", "absent", "V100"): "fp16",  # no bf16 on the GPU: Accelerate adds the fp16 block
    ("absent", "absent", "H100"): "bf16",  # a missing block is added too
    ("absent", "auto", "H100"): "bf16",
    ("absent", "auto", "V100"): "fp16",
    ("true", "auto", "H100"): "bf16",  # written true wins
    ("absent", "true", "H100"): "fp16",
    ("false", "auto", "H100"): "fp16",  # bf16 turned off: the other "auto" one
    ("false", "absent", "H100"): "no",  # written false stays false
    ("auto", "false", "V100"): "no",
    ("false", "false", "H100"): "no",
}


@pytest.mark.parametrize(("bf16", "fp16", "gpu"), sorted(EXPECTED))
def test_the_reported_precision_is_passed_to_the_launcher(tmp_path: Path, bf16: str, fp16: str, gpu: str) -> None:
    expected = EXPECTED[(bf16, fp16, gpu)]
    ds = brought_json(tmp_path, bf16, fp16)
    result = decide(answers("accelerate", gpu, ds), tmp_path / "acc")
    assert result.recommendation.settings["mixed_precision"] == expected
    assert f"  --mixed_precision {expected} \\\n" in file(result, "launch.sh").text
    assert "mixed_precision" not in parsed(result, "accelerate_config.yaml")  # Accelerate rejects it there
    fp32 = [w for w in result.warnings if "trains in fp32" in w]
    assert bool(fp32) == (expected == "no"), result.warnings
    assert not [w for w in result.warnings if "nothing fills it" in w]  # launch.sh fills it

    axolotl = decide(answers("axolotl", gpu, ds), tmp_path / "ax")
    assert axolotl.recommendation.settings["mixed_precision"] == expected
    assert axolotl_precision(parsed(axolotl, "axolotl.yaml")) == expected


def test_the_old_bfloat16_block_with_auto_is_refused(tmp_path: Path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"bfloat16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}))
    with pytest.raises(DeepSpeedConfigError, match=r'bfloat16\.enabled is "auto"') as raised:
        decide(answers("accelerate", "H100", str(ds)), tmp_path / "out")
    assert int(raised.value.exit_code) == 2 and raised.value.hint == 'rename the block "bfloat16" to "bf16"'


def test_check_flags_an_auto_precision_nothing_fills(tmp_path: Path) -> None:
    result = decide(answers("accelerate", "H100", brought_json(tmp_path, "auto", "absent")), tmp_path / "out")
    yaml_data = parsed(result, "accelerate_config.yaml")
    ds_data = parsed(result, "ds_config.json")

    def load_json(path: str) -> object:
        assert path == "ds_config.json"
        return ds_data

    alone = [
        f for f in check_config(yaml_data, "accelerate", load_json=load_json) if f.check == "acc-ds-precision-auto"
    ]
    assert [(f.severity, f.path) for f in alone] == [("warning", "ds_config.json:bf16.enabled")]
    assert "fp32" in alone[0].message and "--mixed_precision bf16" in alone[0].fix
    launched = check_config(yaml_data, "accelerate", load_json=load_json, launch_mixed_precision="bf16")
    assert not [f for f in launched if f.check == "acc-ds-precision-auto"]


@pytest.mark.tools
@pytest.mark.parametrize("target", TARGETS)
def test_every_switch_combination_trains_in_the_reported_precision(tmp_path: Path, target: str) -> None:
    """Accelerate's and Transformers' own resolution, then DeepSpeed's parse, give the reported precision."""
    for bf16, fp16, gpu in COMBOS:
        out = tmp_path / f"{bf16}-{fp16}-{gpu}"
        result = decide(answers(target, gpu, brought_json(tmp_path, bf16, fp16)), out, write=True)
        reported = result.recommendation.settings["mixed_precision"]
        case = (bf16, fp16, gpu, reported)
        if target == "accelerate":
            flags = launch_args(out)
            got = accelerate_deepspeed_precision(out / "accelerate_config.yaml", cwd=out, extra_args=flags)
            assert got == {"mixed_precision": reported, "precision": reported}, case
            # Without the flag every "auto" is off: only a block written true survives.
            bare = [arg for arg in flags if arg not in ("--mixed_precision", reported)]
            alone = accelerate_deepspeed_precision(out / "accelerate_config.yaml", cwd=out, extra_args=bare)
            written = "bf16" if bf16 == "true" else ("fp16" if fp16 == "true" else "no")
            assert alone["precision"] == written, case
        else:
            cfg = yaml.safe_load((out / "axolotl.yaml").read_text())
            ds = json.loads((out / "ds_config.json").read_text())
            got = trainer_deepspeed_precision(
                ds, bf16=cfg.get("bf16") is True, fp16=cfg.get("fp16") is True, world_size=2
            )
            assert got == {"mismatches": [], "precision": reported}, case


DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "no": "torch.float32"}


@pytest.mark.launch
@pytest.mark.parametrize(
    ("bf16", "fp16", "gpu"), [("auto", "absent", "H100"), ("absent", "auto", "V100"), ("false", "absent", "H100")]
)
def test_the_generated_launch_sh_trains_in_the_reported_precision(
    tmp_path: Path, bf16: str, fp16: str, gpu: str
) -> None:
    """A one-process DeepSpeed run through launch.sh: the engine's dtype is the reported precision."""
    out = tmp_path / "out"
    result = decide(answers("accelerate", gpu, brought_json(tmp_path, bf16, fp16), gpus=1), out, write=True)
    reported = result.recommendation.settings["mixed_precision"]
    assert reported == EXPECTED[(bf16, fp16, gpu)]
    port = require_tool("accelerate.utils.other").get_free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    # TINY_TRAIN_FP16_ON_CPU: DeepSpeed's CPU accelerator would refuse fp16 (test-only, see the script).
    env.update(tool_env(), TINY_TRAIN_FP16_ON_CPU="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    command = ["bash", str(out / "launch.sh"), "--main_process_port", str(port), str(TINY_TRAIN)]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith(TINY_TRAIN_MARKER)]
    assert len(records) == 1 and records[0]["model"] == "DeepSpeedEngine", proc.stdout
    engine = {key: records[0][key] for key in ("engine_dtype", "engine_bf16", "engine_fp16")}
    assert engine == {
        "engine_dtype": DTYPES[reported],
        "engine_bf16": reported == "bf16",
        "engine_fp16": reported == "fp16",
    }
