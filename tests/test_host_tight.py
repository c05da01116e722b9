"""A CPU offload that fits the host RAM given, but with little of its usable part left, is said to be tight.

Invariant, over every decided path: the warning appears exactly when the chosen layout offloads to
the CPU, the host RAM was given, the offload fits it, and it takes more than HOST_TIGHT_SHARE of the
usable part; its figures are the estimate's.
"""

from __future__ import annotations

from pathlib import Path

from test_step_comparisons import TWO_H100_MACHINES_70B

from helpers import decide, decided_paths
from realtools import axolotl_validate
from wizard.engine.advice import HOST_TIGHT_SHARE
from wizard.engine.memory import FIT_MARGIN, OFFLOAD_STRATEGIES, to_gib

TIGHT = "host RAM is nearly full:"


def test_the_host_ram_warning_appears_exactly_when_the_offload_leaves_little_usable_ram(tmp_path: Path) -> None:
    tight = roomy = 0
    for answers, result in decided_paths(tmp_path):
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        est = rec.facts.estimates.get(strategy) if rec.facts.estimates else None
        said = [" ".join(w.split()) for w in result.warnings if w.startswith(TIGHT)]
        expected = (
            est is not None
            and strategy in OFFLOAD_STRATEGIES
            and answers.get("offload") != "nvme"
            and est.host_memory is not None
            and bool(est.host_fits)
            and est.host_per_node > HOST_TIGHT_SHARE * FIT_MARGIN * est.host_memory
        )
        assert len(said) == int(expected), (answers, said)
        if expected:
            assert est is not None
            tight += 1
            assert f"about {to_gib(est.host_per_node)} GiB per machine" in said[0]
            assert f"{est.host_per_node / (FIT_MARGIN * est.host_memory):.0%} of the" in said[0]
        elif est is not None and strategy in OFFLOAD_STRATEGIES and est.host_memory is not None:
            roomy += 1
    assert tight and roomy, (tight, roomy)


# Two machines of 8 x H100, a 70B full fine-tune with Axolotl, with the host RAM set per run below.
TWO_H100_NO_RAM = {key: value for key, value in TWO_H100_MACHINES_70B.items() if key != "cpu_memory_gb"}
LAST_SAVE = "axolotl.yaml saves the final model in shards (final_state_dict_type: SHARDED_STATE_DICT):"


def test_the_last_save_is_sharded_exactly_where_a_full_copy_would_not_fit_beside_the_offload(tmp_path: Path) -> None:
    """Axolotl's final FULL_STATE_DICT gathers a full fine-tune's fp32 weights into machine 0's host RAM
    while the offload still holds its share: exactly where the two pass the usable host RAM,
    axolotl.yaml saves the final model in shards instead, and the summary says so and how to merge."""
    from helpers import decide
    from wizard.engine.advice import final_save_bytes

    runs = [*decided_paths(tmp_path)]
    runs += [
        ({**TWO_H100_NO_RAM, "cpu_memory_gb": gb}, decide({**TWO_H100_NO_RAM, "cpu_memory_gb": gb}, tmp_path / str(gb)))
        for gb in (1300, 2000)
    ]
    said_count = 0
    for answers, result in runs:
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        est = rec.facts.estimates.get(strategy) if rec.facts.estimates else None
        said = [" ".join(w.split()) for w in result.warnings if w.startswith(LAST_SAVE)]
        saved = final_save_bytes(rec.facts)
        expected = (
            est is not None
            and answers.get("target") == "axolotl"
            and strategy in ("fsdp2_offload", "hsdp_offload")
            and est.host_memory is not None
            and bool(est.host_fits)
            and saved > 0
            and est.host_per_node + saved > FIT_MARGIN * est.host_memory
        )
        assert len(said) == int(expected), (answers, said)
        if expected:
            assert est is not None
            said_count += 1
            assert f"about {to_gib(saved)} GiB of fp32 weights" in said[0], said[0]
            assert f"beside the offload's {to_gib(est.host_per_node)} GiB" in said[0], said[0]
            assert "axolotl merge-sharded-fsdp-weights axolotl.yaml" in said[0], said[0]
        # What the file writes is what the note says: shards exactly there, a full copy elsewhere.
        config = next((f.text for f in result.files if f.name == "axolotl.yaml"), "")
        if "final_state_dict_type" in config:
            kind = "SHARDED_STATE_DICT" if expected else "FULL_STATE_DICT"
            assert f"final_state_dict_type: {kind}" in config, (answers, kind)
            if expected and said_count == 1:
                # Axolotl's own validator takes the sharded final save (once: it is one key).
                path = tmp_path / "sharded-final.yaml"
                path.write_text(config, encoding="utf-8")
                checked = axolotl_validate(path, n_gpu=int(answers.get("gpus_per_node", 1)))
                assert checked["fsdp_config"]["final_state_dict_type"] == "SHARDED_STATE_DICT"
    assert said_count, "the 1300 GB run has too little host RAM for its last save"


UNKNOWN_SAVE = "cpu_memory_gb was not given, so axolotl.yaml keeps the final save whole"


def test_a_whole_final_save_beside_an_offload_names_the_ram_it_needs_when_the_ram_is_not_given(
    tmp_path: Path,
) -> None:
    """Without cpu_memory_gb the wizard cannot shard the final save where it would not fit: the
    summary then says what the whole save gathers and how much host RAM that needs, over every
    Axolotl full fine-tune that offloads with FSDP2, and nowhere else."""
    from helpers import decide
    from wizard.engine.advice import final_save_bytes

    runs = [*decided_paths(tmp_path), (TWO_H100_NO_RAM, decide(TWO_H100_NO_RAM, tmp_path / "unknown"))]
    said_count = 0
    for answers, result in runs:
        rec = result.recommendation
        strategy = str(rec.settings.get("strategy"))
        est = rec.facts.estimates.get(strategy) if rec.facts.estimates else None
        said = [" ".join(w.split()) for w in result.warnings if w.startswith(UNKNOWN_SAVE)]
        saved = final_save_bytes(rec.facts)
        expected = (
            est is not None
            and answers.get("target") == "axolotl"
            and strategy in ("fsdp2_offload", "hsdp_offload")
            and est.host_memory is None
            and saved > 0
        )
        assert len(said) == int(expected), (answers, said)
        if expected:
            assert est is not None
            said_count += 1
            need = to_gib(int((est.host_per_node + saved) / FIT_MARGIN))
            assert f"about {to_gib(saved)} GiB of fp32 weights" in said[0], said[0]
            assert f"which needs about {need} GiB of RAM installed (free -g's total; " in said[0], said[0]
            config = next(f.text for f in result.files if f.name == "axolotl.yaml")
            assert "final_state_dict_type: FULL_STATE_DICT" in config
    assert said_count, "no Axolotl FSDP2 offload of a full fine-tune without cpu_memory_gb"


def test_a_refusal_short_of_host_ram_only_by_the_allowance_says_close_call_and_how_to_try(tmp_path: Path) -> None:
    """2 x 8 H100, 70B full fine-tune, 930 GiB of host RAM: ZeRO-3 with the optimizer on the CPU needs
    985.6 GiB by DeepSpeed's 1.5x allowance, but the offloaded state itself fits the usable part. The
    refusal calls it a close call and names the route it promises (a DeepSpeed JSON of the user's,
    run as written), and that route does run the layout."""
    import json

    answers = {
        "target": "accelerate", "hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 8, "num_nodes": 2,
        "gpu_link": "nvlink", "network_gbps": 400, "cpu_memory_gb": 930, "model": "llama-3.1-70b",
        "method": "full", "sequence_length": 4096, "global_batch_size": 64,
    }  # fmt: skip
    refused = decide(answers, tmp_path / "refused").recommendation
    assert refused.refused
    text = " ".join(refused.because.split())
    assert "short only by the 1.5x allowance: without it the" in text, text
    assert "give a DeepSpeed JSON with that offload as deepspeed_config" in text, text
    ds = tmp_path / "ds.json"
    ds.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "bf16": {"enabled": True},
                "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
            }
        )
    )
    tried = decide({**answers, "deepspeed_config": str(ds)}, tmp_path / "tried").recommendation
    assert not tried.refused and tried.settings["strategy"] == "zero3_offload_optimizer"
    # Still short by the estimate, and said so, as the refusal warned.
    assert tried.facts.estimates["zero3_offload_optimizer"].host_fits is False
