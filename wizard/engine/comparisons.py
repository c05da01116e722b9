"""What a backend that would fit costs compared with the chosen one ("why not X?").

One text per backend that has a memory layout, rendered like the tree's `because` texts (Jinja,
sandboxed) with the answers, the facts and `est`, plus:

* ``runner``: this backend's estimate (``total_gib``, ``states_gib``, ``activations_gib``, ...),
* ``chosen``: the chosen layout's estimate (None when it has none), ``chosen_title`` and
  ``chosen_backend`` (its backend id),
* ``choice``: the user's answers the winning rule needed ("you asked for CPU offload"), or "".

Each text names the memory per GPU of both, then what this backend adds per training step or to
the setup. The figures are the estimator's, never computed here.
"""

from __future__ import annotations

from wizard.engine.texts import located

_WHERE = "wizard/engine/comparisons.py"

_CHOICE = "{% if choice %}; {{ choice }}, which is what {{ chosen_title }} was chosen for{% endif %}."

_VERSUS = "{% if chosen %} against {{ chosen.total_gib }} GiB with {{ chosen_title }}{% endif %}"

COMPARISONS: dict[str, str] = {
    "single_gpu": located(
        "It would fit (about {{ runner.total_gib }} GiB on one GPU{% if world_size == 1 %}"
        + _VERSUS
        + "{% endif %}){% if world_size > 1 %}, but it trains on one of your {{ world_size }} GPUs"
        " and leaves the other {{ world_size - 1 }} idle: each step covers 1/{{ world_size }} of the data"
        " that {{ chosen_title }} covers{% if chosen %} with about {{ chosen.total_gib }} GiB per GPU{% endif %}"
        "{% else %}, in one process with nothing extra to install{% endif %}" + _CHOICE,
        _WHERE,
    ),
    "ddp": located(
        "{% if world_size == 1 %}On one GPU, DDP is the same single process (about {{ runner.total_gib }} GiB"
        + _VERSUS
        + ") with a launcher and a process group added and no other GPU to average gradients with"
        "{% else %}It would fit, but every GPU keeps a whole copy of the training state: about"
        " {{ runner.total_gib }} GiB per GPU" + _VERSUS + "{% if chosen and chosen.total_gib < runner.total_gib %},"
        " memory a longer sequence or a bigger micro-batch could use{% endif %}{% endif %}" + _CHOICE,
        _WHERE,
    ),
    "deepspeed": located(
        "It would fit: ZeRO-3 needs about {{ runner.total_gib }} GiB per GPU" + _VERSUS + "{% if world_size == 1 %},"
        " with no other GPU to share the states with{% elif chosen_backend in ['ddp', 'single_gpu'] %},"
        " but it gathers every layer's weights from the other GPUs in each forward and backward pass,"
        " traffic that DDP does not have{% elif chosen_backend == 'fsdp2' %}, sharding the same way, so it"
        " is no faster{% endif %}. It adds the deepspeed package and a DeepSpeed JSON to keep in step with"
        " the {{ 'Accelerate' if target == 'accelerate' else 'Axolotl' }} config"
        "{% if chosen_backend == 'fsdp2' %}, where FSDP2 comes with PyTorch{% endif %}" + _CHOICE,
        _WHERE,
    ),
    "fsdp2": located(
        "It would fit: {% if world_size > 1 %}sharded over {{ world_size }} GPUs{% else %}on one GPU{% endif %}"
        " FSDP2 needs about {{ runner.total_gib }} GiB per GPU" + _VERSUS + "{% if world_size == 1 %}, with no other"
        " GPU to share the states with, and adds a wrapping policy to configure{% elif chosen_backend in"
        " ['ddp', 'single_gpu'] %}, but it gathers every layer's weights from the other GPUs in each forward"
        " and backward pass and scatters the gradients back, traffic that DDP does not have{% endif %}" + _CHOICE,
        _WHERE,
    ),
}
"""Keyed by backend id; a backend without a text is explained by the rule it missed."""
