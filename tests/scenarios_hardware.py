"""Acceptance table rows of the hardware gate (guidelines H1-H3 of decision_tree.yaml).

Row 1: a TPU with torch_xla is Accelerate's XLA backend in bf16, launched with --tpu. Row 2: a TPU
without torch_xla is refused, naming what is missing, and nothing is written. Row 3: Axolotl on a
TPU is outside its guidance. Row 37: eight Gaudi 2 cards are MULTI_HPU in bf16, with the Habana
stack named and a clear warning that a full copy of a 7B full fine-tune does not fit in 96 GB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import decide, file, parsed
from scenario_table import row
from wizard.errors import InvalidAnswerError

# The table's rows as answers files would carry them.
ROW1: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "tpu",
    "torch_xla": True,
    "gpus_per_node": 8,
    "model": "1B",
    "method": "full",
    "sequence_length": 2048,
    "micro_batch_size": 1,
}
ROW2: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "tpu",
    "torch_xla": False,
    "model": "1B",
    "method": "full",
    "sequence_length": 2048,
    "micro_batch_size": 1,
}
ROW37: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "hpu",
    "gpus_per_node": 8,
    "gpu_memory_gb": 96,
    "model": "7B",
    "method": "full",
    "sequence_length": 2048,
    "micro_batch_size": 1,
}


@row(1)
def _row1_tpu_with_torch_xla_is_xla_in_bf16(tmp_path: Path) -> None:
    result = decide(ROW1, tmp_path)
    rec = result.recommendation
    assert (rec.backend, rec.rule.id) == ("xla", "tpu_xla"), rec.because
    assert rec.settings["mixed_precision"] == "bf16" and rec.settings["num_processes"] == 8
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "XLA" and acc["mixed_precision"] == "bf16"
    assert acc["num_processes"] == 8 and acc["num_machines"] == 1 and acc["use_cpu"] is False
    assert acc["main_training_function"] == "main" and acc["downcast_bf16"] is False
    assert acc["tpu_use_cluster"] is False and "gpu_ids" not in acc
    launch = file(result, "launch.sh").text
    assert "  --tpu \\\n" in launch, launch
    assert [f.name for f in result.files] == ["accelerate_config.yaml", "launch.sh", "answers.yaml"]


@row(2)
def _row2_tpu_without_torch_xla_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    result = decide(ROW2, tmp_path)
    rec = result.recommendation
    assert rec.refused and rec.backend is None and rec.rule.id == "tpu_without_torch_xla"
    assert "torch_xla" in rec.because and "TPU runtime" in rec.because
    assert "drop the TPU flags" in rec.because
    assert result.files == [], "no executable XLA config is written"
    # The XLA backend is the runner-up, and why it lost names the missing answer.
    (xla,) = [r for r in rec.runner_ups if r.backend == "xla"]
    assert xla.reason == "Needs torch_xla and a TPU runtime; this run has torch_xla: no.", xla.reason


@row(3)
def _row3_axolotl_on_a_tpu_is_outside_its_guidance(tmp_path: Path) -> None:
    with pytest.raises(InvalidAnswerError) as info:
        decide({"target": "axolotl", "hardware": "tpu", "model": "7B", "method": "lora"}, tmp_path)
    assert info.value.key == "hardware"
    assert "Axolotl trains on NVIDIA (CUDA) and AMD (ROCm) GPUs only" in info.value.message


@row(
    37,
    note="the table expects MULTI_HPU although 7B x 16 B of training state is more than one 96 GB card; "
    "H3 gives Gaudi only the MULTI_HPU path (the wizard offers no sharding there), so the wizard "
    "follows it and warns that a full copy does not fit",
)
def _row37_gaudi_is_multi_hpu_in_bf16_with_the_caveats(tmp_path: Path) -> None:
    result = decide(ROW37, tmp_path)
    rec = result.recommendation
    assert (rec.backend, rec.rule.id) == ("multi_hpu", "gaudi_multi_hpu"), rec.because
    assert rec.settings["mixed_precision"] == "bf16" and rec.settings["num_processes"] == 8
    assert rec.facts.get("fits_ddp") is False, "7B x 16 B does not fit in 0.8 x 96 GB"
    assert "habana_frameworks" in rec.because and "hooks" in rec.because
    assert "Warning: by the wizard's estimate a full copy does not fit" in rec.because
    acc = parsed(result, "accelerate_config.yaml")
    assert acc["distributed_type"] == "MULTI_HPU" and acc["mixed_precision"] == "bf16"
    assert acc["num_processes"] == 8 and acc["gpu_ids"] == "all" and acc["use_cpu"] is False
    assert not {"deepspeed_config", "fsdp_config", "downcast_bf16", "tpu_use_cluster"} & set(acc)
    # The warning travels with the files: it is in the config's header comment.
    header = " ".join(line[2:] for line in file(result, "accelerate_config.yaml").text.splitlines() if line[:2] == "# ")
    assert "Warning: by the wizard's estimate a full copy does not fit" in header
