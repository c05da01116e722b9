"""An Accelerate QLoRA run's Key settings say how the 4-bit base is loaded and what PEFT's usual call would add.

The invariant, over the walk's paths: wherever the wizard writes train_snippet.py for a QLoRA run of the
user's own script, the Key settings name PEFT's prepare_model_for_kbit_training and the memory its fp32
casts would add, 2 bytes for every weight bitsandbytes leaves in 16-bit (all but the blocks' linear
layers), which the estimate does not count; the snippet itself does not call it. Nowhere else is the
row printed.
"""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

from rich.console import Console

from helpers import ONE_4090_8B_QLORA, decide, decided_paths, file, tree
from wizard.engine.memory import GIB, to_gib
from wizard.ui.console import print_result

ROW = re.compile(
    r"4-bit base NF4 by bitsandbytes, loaded in your training script as train_snippet\.py shows; not with PEFT's"
    r" prepare_model_for_kbit_training, which casts the ([\d.]+)B weights left in 16-bit \(embeddings, output head,"
    r" norms\) to fp32: about ([\d.]+) GiB more per GPU than the estimate counts, and more for the hidden states"
    r" between the layers, which then follow in fp32"
)


def _summary(answers: dict[str, object], folder: Path) -> str:
    result = decide(answers, folder)
    out = StringIO()
    print_result(Console(file=out, width=80), tree(), result, dry_run=True, detail=False)
    return " ".join(out.getvalue().split())


def test_the_4bit_row_names_the_fp32_casts_the_estimate_leaves_out(tmp_path: Path) -> None:
    paths = decided_paths(tmp_path)
    shown = absent = 0
    for number, (answers, result) in enumerate(paths[::3]):
        text = _summary(answers, tmp_path / f"o{number}")
        found = ROW.search(text)
        snippet = any(f.name == "train_snippet.py" for f in result.files)
        if answers["target"] == "accelerate" and answers["method"] == "qlora" and snippet:
            assert found is not None, (answers, text[:3000])
            shape = result.recommendation.facts.workload.shape
            kept = shape.params - shape.quantizable_params
            assert float(found.group(1)) == round(kept / 1e9, 1), (answers, found.group(0))
            assert float(found.group(2)) == to_gib(2 * kept), (answers, found.group(0))
            # The snippet names the call only to say why it is not made.
            code = [
                line for line in file(result, "train_snippet.py").text.splitlines() if not line.strip().startswith("#")
            ]
            assert not any("prepare_model_for_kbit_training" in line for line in code), answers
            shown += 1
        else:
            assert found is None and "prepare_model_for_kbit_training" not in text, (answers, text[:2000])
            absent += 1
    assert shown >= 3 and absent >= 20, (shown, absent)


def test_llama_3_1_8b_casts_its_embeddings_head_and_norms(tmp_path: Path) -> None:
    """Counted by hand from the model's config.json: 128,256 x 4,096 twice (untied) and 65 norms of 4,096."""
    answers = dict(ONE_4090_8B_QLORA)
    found = ROW.search(_summary(answers, tmp_path))
    assert found is not None
    kept = 2 * 128_256 * 4_096 + (2 * 32 + 1) * 4_096
    assert found.group(1) == "1.1" and float(found.group(2)) == round(2 * kept / GIB, 1) == 2.0
