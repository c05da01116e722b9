"""Context and sequence parallelism take effect only with the user's script (or install) in step.

Over every long-context path of the tree walk (tests/paths.py): an Accelerate FSDP2 run with
``parallelism_config_cp_size`` > 1 gets a ``train_snippet.py`` whose training step runs inside
``accelerator.maybe_context_parallel`` with SDPA attention, exactly then, and its headers and the
summary say what the script needs; Axolotl's ``context_parallel_size`` names the ringmaster
package and the attention it needs; DeepSpeed sequence parallelism names the loss it needs. The
tools tier binds the snippet's call to Accelerate 1.15's real ``maybe_context_parallel`` signature
and runs the snippet on the CPU in one process (no CUDA, so nothing is split there).
"""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import enumerate_paths
from test_levers import RTX4090X2_70B_QLORA

from helpers import decide, decided_paths, file, tree
from realtools import require_tool, tool_env
from wizard.app import Result
from wizard.engine.conditions import iter_compares


def _long_context() -> int:
    """The sequence length from which the tree asks for context parallelism (its only threshold)."""
    question = tree().question("context_parallel_size")
    assert question is not None and question.when is not None
    (threshold,) = [
        leaf.value for leaf in iter_compares(question.when) if leaf.name == "sequence_length" and leaf.op == "gte"
    ]
    return int(threshold)


LONG_CONTEXT = _long_context()

CP_CALL = "accelerator.maybe_context_parallel("


@pytest.fixture(scope="module")
def long_paths(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[dict[str, Any], Result]]:
    """Every long-context path of the walk that reaches a recommendation."""
    return decided_paths(
        tmp_path_factory.mktemp("long"),
        lambda a: int(a.get("sequence_length", 0)) >= LONG_CONTEXT or "context_parallel_size" in a,
    )


H100_8B = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "H100",
    "gpus_per_node": 8,
    "model": "8B",
    "method": "full",
}


def sizes(result: Result) -> tuple[str, int, int]:
    settings = result.recommendation.settings
    return str(settings.get("backend")), int(settings.get("cp_size") or 1), int(settings.get("sp_size") or 1)


def header(result: Result, name: str) -> str:
    """The comment block at the top of a generated file."""
    lines = file(result, name).text.splitlines()
    end = next(index for index, line in enumerate(lines) if not line.startswith("#"))
    return "\n".join(lines[:end])


def flat(text: str) -> str:
    """Comment text as one line (the header wraps long lines)."""
    return " ".join(line.lstrip("#").strip() for line in text.splitlines())


def accelerate_cp(long_paths: list[tuple[dict[str, Any], Result]]) -> list[tuple[dict[str, Any], Result, int]]:
    return [
        (a, r, sizes(r)[1])
        for a, r in long_paths
        if a["target"] == "accelerate" and sizes(r)[0] == "fsdp2" and sizes(r)[1] > 1
    ]


def cp_call(source: str) -> ast.Call:
    """The snippet's one maybe_context_parallel call."""
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "maybe_context_parallel"
    ]
    assert len(calls) == 1, calls
    return calls[0]


def cp_block(source: str) -> str:
    """The body of the `with accelerator.maybe_context_parallel(...)` block, as code."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.With) and any(
            ast.unparse(item.context_expr).startswith(CP_CALL) for item in node.items
        ):
            return "\n".join(ast.unparse(statement) for statement in node.body)
    raise AssertionError("no `with accelerator.maybe_context_parallel(...)` block")


def test_the_walk_reaches_every_kind_of_split(long_paths: list[tuple[dict[str, Any], Result]]) -> None:
    kinds = {(a["target"], sizes(r)[0], sizes(r)[1] > 1, sizes(r)[2] > 1) for a, r in long_paths}
    assert ("accelerate", "fsdp2", True, False) in kinds
    assert ("axolotl", "fsdp2", True, False) in kinds
    assert ("accelerate", "deepspeed", False, True) in kinds
    assert len(accelerate_cp(long_paths)) >= 5


def test_accelerate_cp_paths_get_the_snippet_with_the_cp_step(long_paths: list[tuple[dict[str, Any], Result]]) -> None:
    for _, result, cp in accelerate_cp(long_paths):
        source = file(result, "train_snippet.py").text
        compile(source, "train_snippet.py", "exec")
        call = cp_call(source)
        assert {k.arg for k in call.keywords} == {"buffers", "buffer_seq_dims", "no_restore_buffers"}
        assert 'attn_implementation="sdpa"' in source
        assert f"CP_SIZE = {cp}\n" in source
        acc = yaml.safe_load(file(result, "accelerate_config.yaml").text)
        assert acc["parallelism_config"]["parallelism_config_cp_size"] == cp
        # The step (forward, backward, optimizer step) is inside the block: one `with` holds them.
        step = cp_block(source)
        assert "accelerator.backward(loss)" in step and "optimizer.step()" in step
        assert "shift_labels=shift_labels" in step and "position_ids=position_ids" in step


def test_accelerate_cp_headers_and_summary_state_the_requirement(
    long_paths: list[tuple[dict[str, Any], Result]],
) -> None:
    for answers, result, cp in accelerate_cp(long_paths):
        note = next(w for w in result.warnings if "maybe_context_parallel" in w)
        for name in ("accelerate_config.yaml", "train_snippet.py"):
            text = flat(header(result, name))
            assert "only takes effect inside accelerator.maybe_context_parallel" in text, (name, text)
            assert 'attn_implementation="sdpa"' in text and f"a multiple of {2 * cp} tokens" in text
        # launch.sh points at them rather than repeating them.
        assert "at the head of accelerate_config.yaml before the first run" in flat(header(result, "launch.sh"))
        length = int(answers["sequence_length"])
        if length % (2 * cp):
            assert f"sequence_length {length} is not: pad it to" in note
        else:
            assert f"sequence_length {length} already is." in note


def test_no_cp_step_without_context_parallel(tmp_path: Path, long_paths: list[tuple[dict[str, Any], Result]]) -> None:
    with_cp = {id(r) for _, r, _ in accelerate_cp(long_paths)}
    short = [a for a in enumerate_paths(tmp_path) if a["target"] == "accelerate"][:120]
    results = [r for _, r in long_paths] + [decide(a, tmp_path / "out") for a in short if a.get("hardware") != "tpu"]
    for result in results:
        if id(result) in with_cp or result.recommendation.refused:
            continue
        for rendered in result.files:
            assert "maybe_context_parallel" not in rendered.text, (rendered.name, sizes(result))


def test_axolotl_cp_names_ringmaster_and_its_attention(long_paths: list[tuple[dict[str, Any], Result]]) -> None:
    checked = 0
    for answers, result in long_paths:
        backend, cp, _ = sizes(result)
        if answers["target"] != "axolotl" or backend != "fsdp2" or cp == 1:
            continue
        text = flat(header(result, "axolotl.yaml"))
        assert 'pip install "axolotl[ringmaster]"' in text and "must not be eager" in text
        assert "train_snippet.py" not in [f.name for f in result.files]
        config = yaml.safe_load(file(result, "axolotl.yaml").text)
        assert config["context_parallel_size"] == cp
        shape = result.recommendation.facts.shape
        assert shape is not None
        ulysses = shape.kv_heads % cp == 0 and cp <= int(answers["gpus_per_node"])
        if config["attn_implementation"] == "flash_attention_2":
            assert "serves every split" in text
        else:
            assert "only the pure Ulysses split trains" in text
            assert ("so choose another size" in text) is not ulysses, text
        checked += 1
    assert checked >= 4


def test_deepspeed_sp_names_the_loss_it_needs(long_paths: list[tuple[dict[str, Any], Result]]) -> None:
    found = [r for a, r in long_paths if a["target"] == "accelerate" and sizes(r)[2] > 1]
    assert found
    for result in found:
        text = flat(header(result, "accelerate_config.yaml"))
        assert "UlyssesSPDataLoaderAdapter" in text and "shift_labels" in text and "all_gather" in text


def test_an_odd_length_is_told_its_padding(tmp_path: Path) -> None:
    answers = {
        **H100_8B,
        "sequence_length": 98765,
        "micro_batch_size": 1,
        "context_parallel_size": 4,
    }
    result = decide(answers, tmp_path)
    assert sizes(result)[1] == 4
    assert any("sequence_length 98765 is not: pad it to 98768" in w for w in result.warnings)
    assert "else 98768\n" in file(result, "train_snippet.py").text  # the --model default length


# --- against the real tools -------------------------------------------------------------------------


@pytest.mark.tools
def test_the_cp_call_binds_to_accelerates_signature(long_paths: list[tuple[dict[str, Any], Result]]) -> None:
    accelerate = require_tool("accelerate")
    signature = inspect.signature(accelerate.Accelerator.maybe_context_parallel)
    assert list(signature.parameters) == ["self", "buffers", "buffer_seq_dims", "no_restore_buffers"]
    for _, result, _ in accelerate_cp(long_paths):
        call = cp_call(file(result, "train_snippet.py").text)
        assert not call.args
        signature.bind(None, **{k.arg: None for k in call.keywords if k.arg})
        dims = next(k.value for k in call.keywords if k.arg == "buffer_seq_dims")
        buffers = next(k.value for k in call.keywords if k.arg == "buffers")
        assert isinstance(dims, ast.List) and isinstance(buffers, ast.Name)
        assert ast.literal_eval(dims) == [1, 1, 1]  # input_ids, shift_labels, position_ids: [batch, seq]


@pytest.mark.tools
def test_the_cp_snippet_runs_on_one_cpu_process(tmp_path: Path) -> None:
    """Not a context-parallel run (that needs CUDA): the generated step runs as written."""
    require_tool("accelerate")
    answers = {
        **H100_8B,
        "sequence_length": 131072,
        "micro_batch_size": 1,
    }
    out = tmp_path / "out"
    decide(answers, out, write=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "PARALLELISM_CONFIG_"))}
    env.update(tool_env())
    script = str(out / "train_snippet.py")
    proc = subprocess.run(
        [sys.executable, script, "--steps", "3"], env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0 of 1: 3 steps" in proc.stdout, proc.stdout
    # Accelerate itself says the block did nothing here: no parallelism_config with cp_size > 1.
    assert "Context parallel training is not enabled" in proc.stderr
    odd = subprocess.run(
        [sys.executable, script, "--seq-len", "30"], env=env, capture_output=True, text=True, timeout=240
    )
    assert odd.returncode == 2 and "--seq-len must be a multiple of 8" in odd.stderr


def test_a_refusal_offers_context_parallel_only_where_the_wizard_takes_it(tmp_path: Path) -> None:
    """A refusal names context_parallel_size as the way out only for sequences the question is asked for.

    Offering it at 4,096 tokens sent the user to an answer the next run ignored ("only for
    sequences of 16384 tokens or more"); short runs are told to make the activations smaller.
    """
    short = {**RTX4090X2_70B_QLORA, "micro_batch_size": 4, "sequence_length": 4096}
    rec = decide(short, tmp_path / "short").recommendation
    assert rec.refused and "context_parallel_size" in rec.because  # named, as not for this length
    assert "split every sequence over several GPUs" not in rec.because
    offered = 0
    for answers, result in decided_paths(tmp_path, refusals=True):
        because = result.recommendation.because
        if result.recommendation.refused and "split every sequence over several GPUs" in because:
            offered += 1
            assert answers.get("sequence_length", 0) >= LONG_CONTEXT, (answers, because)
    assert offered, "no refusal in the walk offers context parallelism"
