"""Acceptance table rows of the topology and launcher rules.

Row 26 is Axolotl on a Ray cluster: Ray only orchestrates; the sharding stack is still chosen by the backend rules.
(Row 27, the SLURM job with an existing DeepSpeed JSON, is checked in tests/test_scenarios.py.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import decide, file, parsed
from scenario_table import row

# 4 nodes x 8 A100 80GB on a Ray cluster, full fine-tune of an 8B model, 4k tokens, Axolotl.
ROW26: dict[str, Any] = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "A100",
    "gpus_per_node": 8,
    "num_nodes": 4,
    "use_ray": True,
    "gpu_memory_gb": 80,
    "model": "8B",
    "method": "full",
    "sequence_length": 4096,
    "micro_batch_size": 1,
}


@row(26)
def _row26_ray_orchestrates_fsdp2(tmp_path: Path) -> None:
    result = decide(ROW26, tmp_path)
    rec = result.recommendation
    # Ray is no sharding stack: FSDP2 fully sharded over the 32 GPUs (B7). Without Ray the same
    # run is hybrid-sharded per machine (T5); Ray places workers itself, so no shard groups.
    assert rec.backend == "fsdp2" and rec.rule.id == "sharded_fsdp2", rec.because
    assert rec.settings["num_processes"] == 32 and rec.settings["num_machines"] == 4
    assert rec.settings.get("dp_replicate_size") in (None, 1)
    without_ray = decide({**ROW26, "use_ray": False}, tmp_path / "torchrun").recommendation
    assert (without_ray.backend, without_ray.rule.id) == ("fsdp2", "hsdp")
    cfg = parsed(result, "axolotl.yaml")
    assert cfg["use_ray"] is True and cfg["ray_num_workers"] == 32
    assert cfg["resources_per_worker"] == {"GPU": 1}
    assert cfg["fsdp_version"] == 2 and cfg["fsdp_config"]["reshard_after_forward"] is True
    assert "deepspeed" not in cfg
    launch = file(result, "launch.sh").text
    # `ray status` first, then one command from the head node: no torchrun rendezvous, no ranks.
    assert launch.index("\nray status\n") < launch.index("axolotl preprocess") < launch.index("axolotl train")
    assert "axolotl train axolotl.yaml --use-ray\n" in launch
    assert "--launcher torchrun" not in launch and "NODE_RANK" not in launch
    assert "slurm.sbatch" not in {f.name for f in result.files}
