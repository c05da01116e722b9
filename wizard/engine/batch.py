"""Batch planning: sequences per optimizer step, split into micro-batch, accumulation and data parallel.

The identity every written file set keeps:

    global_batch_size = micro-batch per GPU x gradient accumulation steps x data-parallel GPUs

where the data-parallel GPUs are the processes that see different sequences: the world size
divided by the tensor, context (or DeepSpeed sequence) and pipeline parallel sizes, since the
GPUs of one such group work on the same sequences ("Gradient accumulation", Accelerate's usage
guide: https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation; DeepSpeed's
"Batch Size Related Parameters": https://www.deepspeed.ai/docs/config-json/#batch-size-related-parameters).

Pure arithmetic: the facts (`wizard.engine.facts`) read it, the micro-batch choice that needs the
decision lives in `wizard.engine.batch_choice`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wizard.engine.deepspeed_json import DeepSpeedSummary, batch_number
from wizard.engine.parallel import Layout

# Micro-batches per optimizer step in the Axolotl YAML the wizard writes when no global batch is
# given (Axolotl's own examples' choice).
AXOLOTL_ACCUMULATION = 4
GLOBAL_BATCH = "global_batch_size"
MEGATRON_MICRO_BATCHES_PER_STAGE = 4


@dataclass(frozen=True)
class BatchPlan:
    """One optimizer step's sequences and how the written files split them.

    `micro` is the micro-batch the files write per GPU (Axolotl's context parallel: 1);
    `problem` says why a given global batch cannot be split exactly (then `accumulation` is the
    one the files would have without it); `custom` whether the global batch differs from the one
    the files get without a global_batch_size answer (the headers and the summary then say how
    the script must pass it).
    """

    global_batch: int
    micro: int
    accumulation: int
    data_parallel: int
    problem: str | None = None
    custom: bool = False

    def as_json(self) -> dict[str, int]:
        """The plan for the JSON output."""
        return {
            "global": self.global_batch,
            "micro": self.micro,
            "accumulation": self.accumulation,
            "data_parallel": self.data_parallel,
        }


def data_parallel_size(layout: Layout) -> int:
    """The GPUs that each see different sequences: the world over TP x CP x SP x PP."""
    group = layout.tp * layout.cp * layout.sp * layout.pp
    return max(layout.world // max(group, 1), 1)


def written_micro(answers: Mapping[str, Any], layout: Layout) -> int:
    """The micro-batch the files write: Axolotl's context parallel takes one sequence per GPU."""
    if answers.get("target") == "axolotl" and layout.cp > 1:
        return 1  # as Axolotl's CP examples do; accumulation makes up the rest
    return int(answers.get("micro_batch_size", 1))


def json_numbers(deepspeed: DeepSpeedSummary | None) -> tuple[int | None, int | None]:
    """A brought DeepSpeed JSON's numeric train_batch_size and gradient_accumulation_steps."""
    if deepspeed is None:
        return None, None
    return (
        batch_number(deepspeed.batch, "train_batch_size"),
        batch_number(deepspeed.batch, "gradient_accumulation_steps"),
    )


def default_accumulation(answers: Mapping[str, Any], deepspeed: DeepSpeedSummary | None, layout: Layout) -> int:
    """Micro-batches per optimizer step when no global batch is given.

    A brought DeepSpeed JSON's number decides; Axolotl's YAML gets 4 (times the answered
    micro-batch under context parallel, where the YAML takes one sequence per GPU); an Accelerate
    run steps the optimizer after every micro-batch unless its training script accumulates.
    """
    total, steps = json_numbers(deepspeed)
    if steps:
        return steps
    dp, micro = data_parallel_size(layout), written_micro(answers, layout)
    if total and total % (micro * dp) == 0:
        return total // (micro * dp)
    if layout.megatron:
        # Megatron-LM accumulates through megatron_lm_num_micro_batches: with PP stages, 4 per
        # stage keep the pipeline bubble near (PP - 1) / (4 PP + PP - 1), about 11% for 2 stages.
        return MEGATRON_MICRO_BATCHES_PER_STAGE * layout.pp if layout.pp > 1 else 1
    if answers.get("target") != "axolotl":
        return 1
    return AXOLOTL_ACCUMULATION * (int(answers.get("micro_batch_size", 1)) if layout.cp > 1 else 1)


def default_global_batch(answers: Mapping[str, Any], deepspeed: DeepSpeedSummary | None, layout: Layout) -> int:
    """The global batch the files set without a global_batch_size answer (a brought JSON's own first)."""
    total, _ = json_numbers(deepspeed)
    if total:
        return total
    micro = written_micro(answers, layout)
    return micro * default_accumulation(answers, deepspeed, layout) * data_parallel_size(layout)


def plan_batch(answers: Mapping[str, Any], deepspeed: DeepSpeedSummary | None, layout: Layout) -> BatchPlan:
    """The split of the answered global batch (or the default one) over micro-batch, accumulation and GPUs."""
    dp, micro = data_parallel_size(layout), written_micro(answers, layout)
    given = answers.get(GLOBAL_BATCH)
    fallback = default_accumulation(answers, deepspeed, layout)
    if not isinstance(given, int) or isinstance(given, bool):
        return BatchPlan(micro * fallback * dp, micro, fallback, dp)
    custom = given != default_global_batch(answers, deepspeed, layout)
    problem = batch_problem(given, micro, dp, deepspeed)
    if problem is not None:
        return BatchPlan(given, micro, fallback, dp, problem, custom)
    return BatchPlan(given, micro, given // (micro * dp), dp, custom=custom)


def batch_problem(given: int, micro: int, dp: int, deepspeed: DeepSpeedSummary | None) -> str | None:
    """Why `given` sequences per step cannot be `micro` x a whole accumulation x `dp`, or None."""
    total, steps = json_numbers(deepspeed)
    if total is not None and total != given:
        return f"the DeepSpeed JSON's train_batch_size is {total}; give {total} or leave global_batch_size out"
    if steps is not None and given != micro * steps * dp:
        valid = micro * steps * dp
        return (
            f"the DeepSpeed JSON's gradient_accumulation_steps {steps} x micro-batch {micro} x {dp} data-parallel"
            f" GPUs make {valid}; give {valid} or leave global_batch_size out"
        )
    unit = micro * dp
    if given % unit == 0:
        return None
    below, above = given // unit * unit, (given // unit + 1) * unit
    nearest = f"{below} or {above}" if below else f"{above}"
    return (
        f"it must be a multiple of micro-batch {micro} x {dp} data-parallel GPUs = {unit} (gradient accumulation"
        f" is a whole number); nearest: {nearest}"
    )


def powers_of_two_dividing(count: int, limit: int) -> list[int]:
    """The powers of two that divide `count`, up to `limit`, ascending."""
    out, power = [], 1
    while power <= limit and count % power == 0:
        out.append(power)
        power *= 2
    return out


def batch_line(plan: BatchPlan, world: int, hardware: str = "nvidia", *, pairs: bool = False) -> str:
    """'64 sequences per optimizer step = 2 per GPU x 4 accumulation x 8 GPUs' (the summary's batch row).

    `pairs`: DPO, whose batch counts preference pairs (each a chosen and a rejected sequence).
    """
    noun = ("pair" if pairs else "sequence") + ("" if plan.global_batch == 1 else "s")
    return f"{plan.global_batch} {noun} per optimizer step = {batch_product(plan, world, hardware)}"


def batch_product(plan: BatchPlan, world: int, hardware: str = "nvidia") -> str:
    """How a global batch splits: '2 per GPU x 4 accumulation x 8 GPUs' ('... on the Mac ...' on one Mac)."""
    if hardware == "mps":
        return f"{plan.micro} on the Mac x {plan.accumulation} accumulation"
    unit = "GPU" if hardware in ("nvidia", "amd") else "process" if hardware == "cpu" else "device"
    plural = "processes" if unit == "process" else f"{unit}s"
    dp = plan.data_parallel
    count = (
        f"{dp} {unit if dp == 1 else plural}" if dp == world else f"{dp} data-parallel {unit if dp == 1 else plural}"
    )
    return f"{plan.micro} per {unit} x {plan.accumulation} accumulation x {count}"


def batch_where(
    plan: BatchPlan, target: str, megatron: bool, deepspeed: bool = False, *, dpo: bool = False, fsdp: bool = False
) -> str:
    """Where the files (or the training script) set the plan's micro-batch and accumulation.

    `deepspeed`: the run writes a DeepSpeed JSON, whose "auto" batch keys Accelerate fills from them.
    `dpo`: an Accelerate script trains with TRL's DPOTrainer, whose DPOConfig takes both.
    `fsdp`: the run is FSDP2, whose gradients stay whole on every GPU between micro-batches unless
    the accumulation syncs each one (`SYNC_EACH_BATCH`).
    """
    if target == "axolotl":
        return f"micro_batch_size {plan.micro} and gradient_accumulation_steps {plan.accumulation} in axolotl.yaml"
    if megatron:
        return (
            f"megatron_lm_num_micro_batches {plan.accumulation} in accelerate_config.yaml; pass"
            f" DataLoader(batch_size={plan.micro}) in your script"
        )
    json = '; the DeepSpeed JSON\'s "auto" batch keys take them' if deepspeed else ""
    if dpo:
        return (
            f"pass DPOConfig(per_device_train_batch_size={plan.micro},"
            f" gradient_accumulation_steps={plan.accumulation}) in your script{json}"
        )
    # The Accelerator counts micro-batches only inside accelerator.accumulate: outside it every
    # backward pass steps the optimizer ("Gradient accumulation", Accelerate's usage guides,
    # https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation).
    loop = " and run each training step in a with accelerator.accumulate(model) block" if plan.accumulation > 1 else ""
    if fsdp and plan.accumulation > 1:
        return (
            f"pass DataLoader(batch_size={plan.micro}) and Accelerator(gradient_accumulation_plugin=plugin), with"
            f" plugin = {FSDP2_ACCUMULATION.format(n=plan.accumulation)} from accelerate.utils, in your"
            f" script{loop} ({SYNC_EACH_BATCH})"
        )
    return (
        f"pass DataLoader(batch_size={plan.micro}) and Accelerator(gradient_accumulation_steps={plan.accumulation})"
        f" in your script{loop}{json}"
    )


# Why FSDP2 accumulation syncs each micro-batch: Accelerate's accumulate() otherwise calls FSDP2's
# set_requires_gradient_sync(False) between optimizer steps, and every GPU keeps whole, unsharded
# gradients (4 bytes per parameter) until the last micro-batch; the memory estimate counts them
# sharded (Accelerate, Accelerator.no_sync and GradientAccumulationPlugin:
# https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation).
FSDP2_ACCUMULATION = "GradientAccumulationPlugin(num_steps={n}, sync_each_batch=True)"
SYNC_EACH_BATCH = (
    "sync_each_batch=True: without it, FSDP2 keeps every gradient whole on every GPU until the last"
    " micro-batch, about 4 bytes per parameter more than the estimate, which counts them sharded"
)
