"""No input breaks the wizard: property-based tests over answers files, --set values, DeepSpeed
JSON, config.json and decision-tree files (docs/usage.md: "Exit codes", "The answers file", "Input limits").

Bad input gives exit 2 (3 for a broken tree) with exactly one stderr line "error: ..." naming the
problem, never a traceback; stdout stays empty (or holds one JSON error object with --output
json) and the output folder is not even created. Unusual but valid text comes out as one plain
string value of its own field, whatever YAML, JSON or Jinja it looks like.

The CLI runs in-process (``wizard.cli.main``); the shipped tree is loaded once for the whole
module (loading and linting it is most of the time of one run).
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import json
import math
import os
import re
import string
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import wizard.cli
from helpers import REPO
from wizard.app import load
from wizard.cli import main
from wizard.engine.answers import MAX_TEXT
from wizard.engine.located_yaml import MAX_DEPTH, YamlProblem, parse_yaml
from wizard.engine.texts import TextError, render_text
from wizard.engine.tree import load_tree
from wizard.inputs import MAX_ANSWERS_BYTES, MAX_JSON_BYTES, MAX_TREE_BYTES, load_answers_file

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(FUZZ, max_examples=15)

SHIPPED_TREE = REPO / "decision_tree.yaml"
TREE = load(None)  # the shipped tree, as the CLI finds it without --tree
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))

NVIDIA: dict[str, Any] = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100",
    "gpus_per_node": 1,
    "gpu_memory_gb": 80,
    "model": "1B",
    "method": "lora",
}
BASES: dict[str, dict[str, Any]] = {
    "nvidia": NVIDIA,
    "axolotl": {**NVIDIA, "target": "axolotl"},
    "cpu": {"target": "accelerate", "hardware": "cpu", "cpu_processes": 1, "model": "125M", "method": "full"},
    "mac_lora": {"target": "accelerate", "hardware": "mps", "gpu_memory_gb": 36, "model": "1B", "method": "lora"},
    "nvme": {**NVIDIA, "offload": "nvme", "nvme_path": "/local_nvme"},
    "multinode": {**NVIDIA, "num_nodes": 2},
    "axolotl_multinode": {**NVIDIA, "target": "axolotl", "num_nodes": 2},
    # Two GPUs: the parallel-size questions (every odd size above 1 fails to divide them).
    "two_gpus": {**NVIDIA, "gpus_per_node": 2},
    "long_context": {**NVIDIA, "gpus_per_node": 2, "sequence_length": 32768},
    "tensor_parallel": {**NVIDIA, "gpus_per_node": 2, "model_parallel": True},
    "megatron": {**NVIDIA, "gpus_per_node": 2, "megatron": True},
    # A Qwen3-MoE layout: Axolotl's expert-parallel plugin does not take Mixtral's experts.
    "moe_axolotl": {**NVIDIA, "target": "axolotl", "gpus_per_node": 2, "model": "30B-A3B"},
    "moe_deepspeed": {
        **NVIDIA,
        "gpus_per_node": 2,
        "model": "8x7B",
        "deepspeed_config": str(REPO / "tests" / "assets" / "ds_zero3.json"),
    },
    "tpu": {
        "target": "accelerate",
        "hardware": "tpu",
        "torch_xla": True,
        "gpus_per_node": 8,
        "model": "1B",
        "method": "full",
    },
    # Add-ons (asked after the decision): the optional ones behind tune, FP8 on an H100 full
    # fine-tune, the DDP-only ones on two GPUs, the Axolotl ones, activation offloading on a long
    # full fine-tune, Local SGD on CPU processes.
    "tune": {**NVIDIA, "tune": True},
    "fp8": {**NVIDIA, "gpu_model": "H100", "method": "full", "tune": True},
    "ddp_tune": {**NVIDIA, "gpus_per_node": 2, "tune": True},
    "axolotl_tune": {**NVIDIA, "target": "axolotl", "tune": True},
    "axolotl_long_full": {
        **NVIDIA,
        "target": "axolotl",
        "method": "full",
        "sequence_length": 8192,
        "gradient_checkpointing": True,
    },
    "multi_cpu": {"target": "accelerate", "hardware": "cpu", "cpu_processes": 2, "model": "125M", "method": "full"},
    "dpo_full": {**NVIDIA, "method": "full", "objective": "dpo"},
}
BASE_FOR = {  # every other key: nvidia
    "cpu_processes": "cpu",
    "reference_log_probs": "dpo_full",
    "nvme_path": "nvme",
    "base_model": "axolotl",
    "torch_xla": "tpu",
    "use_ray": "axolotl_multinode",
    "main_process_ip": "multinode",
    "main_process_port": "multinode",
    "same_network": "multinode",
    "network_gbps": "multinode",
    "gpu_link": "two_gpus",
    "megatron": "two_gpus",
    "model_parallel": "two_gpus",
    "context_parallel_size": "long_context",
    "tensor_parallel_size": "tensor_parallel",
    "pipeline_parallel_size": "megatron",
    "expert_parallel_size": "moe_axolotl",
    "moe_layer_cls_names": "moe_deepspeed",
    "torch_compile": "tune",
    "fp8": "fp8",
    "ddp_comm_hook": "ddp_tune",
    "local_sgd_steps": "multi_cpu",
    "cut_cross_entropy": "axolotl",
    "liger": "axolotl_tune",
    "load_in_8bit": "axolotl_tune",
    "profiler_steps": "axolotl_tune",
    "activation_offloading": "axolotl_long_full",
    "layer_offloading": "axolotl",
    "base_dtype": "mac_lora",
}
MARKER = "backend-wizard-pwned"  # a file an executed payload would create


@pytest.fixture(autouse=True)
def _shipped_tree_loaded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--tree FILE` still loads FILE; without it, the CLI gets the tree this module loaded once."""
    real = getattr(wizard.cli, "load", None)
    if real is not None:
        monkeypatch.setattr(wizard.cli, "load", lambda path=None: TREE if path is None else real(path))


# ---------------------------------------------------------------------------------------------
# Running the CLI and checking a refusal
# ---------------------------------------------------------------------------------------------


def cli(*argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process; return (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def assert_one_error_line(err: str, *fragments: str) -> str:
    """Exactly one line on stderr, "error: ...", no traceback, naming every fragment."""
    assert "Traceback" not in err, err
    assert err.endswith("\n") and err.count("\n") == 1 and "\r" not in err, f"not one line: {err!r}"
    line = err[:-1]
    assert line.startswith("error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def assert_refused(
    result: tuple[int, str, str], out_dir: Path, *fragments: str, code: int = 2, as_json: bool = False
) -> str:
    """A clean refusal: the exit code, one error line, the stdout contract, nothing written."""
    exit_code, out, err = result
    assert exit_code == code, (exit_code, err, out[-2000:])
    line = assert_one_error_line(err, *fragments)
    if as_json:
        envelope = json.loads(out)
        assert set(envelope) == {"schema_version", "error"} and envelope["schema_version"] == 1
        assert set(envelope["error"]) == {"type", "exit_code", "message", "hint"}
        assert envelope["error"]["exit_code"] == code
        assert line.startswith("error: " + envelope["error"]["message"])
    else:
        assert out == "", out
    assert not out_dir.exists(), "the output folder must not even be created"
    return line


@pytest.fixture
def workspace(tmp_path: Path) -> Callable[[], Path]:
    """A fresh folder per hypothesis example (tmp_path is shared by all examples of one test)."""
    return lambda: Path(tempfile.mkdtemp(dir=tmp_path))


def answers_file(folder: Path, data: Any, name: str = "answers.yaml") -> Path:
    """An answers file that holds `data` exactly.

    Written with raw Unicode, as people write them, unless a value would not read back: a raw NEL
    (U+0085) is a YAML line break, so "A\x85A" reads as "A A" and a too-long text can shrink to a
    valid one. Such data is written with escapes ("\\N"), which read back exactly.
    """
    path = folder / name
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    with contextlib.suppress(yaml.YAMLError):
        if yaml.safe_load(text) != data:  # NaN is never equal to itself: escaping it changes nothing
            text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")
    return path


@given(value=st.text(max_size=MAX_TEXT + 20))
@example(value="x" * (MAX_TEXT - 1) + "\x85\x85")  # raw, the two line breaks read as one: a valid length
@example(value="A\x85A")
@FUZZ
def test_answers_files_written_here_hold_exactly_their_values(workspace: Callable[[], Path], value: str) -> None:
    """The tests' answers files reach the wizard with the values drawn, whatever the characters."""
    assert load_answers_file(answers_file(workspace(), {"base_model": value})) == {"base_model": value}


def run_answers(folder: Path, data: dict[str, Any], *extra: str) -> tuple[int, str, str]:
    return cli("--answers", str(answers_file(folder, data)), "--output-dir", str(folder / "out"), *extra)


def set_args(values: dict[str, Any]) -> list[str]:
    """--set items as one token each (``--set=KEY=VALUE`` also survives a value starting with '-')."""
    return [f"--set={key}={value}" for key, value in values.items()]


@pytest.mark.parametrize("name", sorted(BASES))
def test_the_base_answers_are_valid(tmp_path: Path, name: str) -> None:
    code, _, err = run_answers(tmp_path, BASES[name], "--dry-run")
    assert code == 0, (name, err)


# ---------------------------------------------------------------------------------------------
# Wrong values for every key, from the answers file and from --set
# ---------------------------------------------------------------------------------------------

LETTERS = st.text(string.ascii_letters + " ", min_size=1, max_size=20)  # never a number, size or path
WORD = st.text(string.ascii_letters, min_size=1, max_size=20)
CONTROL = st.sampled_from([chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))])


def bad_values(qid: str, via: str) -> st.SearchStrategy[Any]:
    """Values the validator must refuse for question `qid`, as the answers file or --set carries them."""
    question = TREE.question(qid)
    assert question is not None
    options: list[st.SearchStrategy[Any]] = []
    if via == "file":
        options.append(st.lists(st.integers(), max_size=3))
        options.append(
            st.dictionaries(st.text(string.ascii_letters, min_size=1, max_size=5), st.integers(), max_size=2)
        )
        if question.type != "yesno":
            options.append(st.booleans())
    if question.type in ("integer", "number"):
        low, high = question.minimum, question.maximum
        assert low is not None and high is not None
        if question.type == "integer":
            options += [
                st.integers(max_value=int(low) - 1),
                st.integers(min_value=int(high) + 1),
                st.just(10**100),
                st.floats().filter(lambda f: not (f.is_integer() and low <= f <= high)),
            ]
        else:
            exclusive = question.exclusive_minimum  # then low itself is refused too
            options += [
                st.floats(max_value=low, exclude_max=not exclusive),
                st.integers(max_value=int(low) if exclusive else math.ceil(low) - 1),
                st.floats(min_value=high, exclude_min=True),
                st.integers(min_value=int(high) + 1),
                st.sampled_from([math.nan, math.inf, -math.inf]),
            ]
        options.append(LETTERS)
    elif question.type == "choice":
        ids = {c.id for c in question.choices}
        options += [st.text(max_size=20).filter(lambda t: t.strip() not in ids), st.integers(), st.floats()]
    elif question.type == "yesno":
        words = {"yes", "y", "true", "on", "1", "no", "n", "false", "off", "0"}
        options.append(st.text(max_size=10).filter(lambda t: t.strip().lower() not in words))
        if via == "file":
            options += [st.integers(), st.floats()]
    elif question.validate == "model_size":
        options += [
            LETTERS.filter(lambda t: bool(t.strip())),
            st.integers(max_value=999),
            st.integers(min_value=10**14 + 1),
            st.sampled_from([math.nan, math.inf, "0", "0.0000001B", "101T", "7Q", "", "   ", "3x7B"]),
        ]
    elif question.validate == "deepspeed_json":
        options += [
            LETTERS.map(lambda t: f"/nonexistent-{t.strip() or 'x'}/ds.json"),
            st.sampled_from(["/", "/tmp", "/nonexistent.json\n", "", "  "]),
        ]
    elif question.validate == "host":
        options += [
            st.sampled_from(["", " ", "10.0.0.1; rm -rf /", "$(reboot)", "host name", "-x", "a/b"]),
            # Letters on both sides: a separator at either end is whitespace the answer may strip.
            st.tuples(WORD, st.sampled_from([" ", ";", "$", "/", "'", "\n"]), WORD).map("".join),
        ]
    elif question.validate == "nvme_path":
        options += [LETTERS.filter(lambda t: bool(t.strip())), st.sampled_from(["local_nvme", "./nvme", "~/nvme", ""])]
    else:  # free text: empty, too long, control characters
        options += [
            st.sampled_from(["", " ", "\t", "\n"]),
            st.text(min_size=MAX_TEXT + 1, max_size=MAX_TEXT + 50).filter(lambda t: bool(t.strip())),
            # NEL (U+0085) included: `answers_file` writes it escaped, so it reaches the validator.
            st.tuples(LETTERS, CONTROL, LETTERS).map("".join),
        ]
    if question.validate in ("divides_world_size", "divides_gpus_per_node"):
        # The parallel-size bases run on 2 GPUs: no odd size above 1 divides them.
        options.append(st.integers(min_value=1, max_value=31).map(lambda k: 2 * k + 1))
    if question.validate == "class_names":
        options.append(st.sampled_from(["transformers.MixtralSparseMoeBlock", "1Block", "A B", "A,,B", "A;B", ","]))
    if via == "set" and question.type in ("text", "path"):
        options.append(st.tuples(LETTERS, st.sampled_from(["\udcff", "\ud800"]), LETTERS).map("".join))
    return st.one_of(options)


def _as_set_value(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


@pytest.mark.parametrize("qid", [q.id for q in TREE.questions])
@given(data=st.data(), via=st.sampled_from(["file", "set"]), as_json=st.booleans())
@FEW
def test_a_bad_value_for_any_key_is_one_clean_error(
    workspace: Callable[[], Path], qid: str, data: st.DataObject, via: str, as_json: bool
) -> None:
    folder = workspace()
    value = data.draw(bad_values(qid, via), label="value")
    base = dict(BASES[BASE_FOR.get(qid, "nvidia")])
    extra = ["--output", "json"] if as_json else []
    if via == "file":
        assume(value is not None)  # null is "not given", not a wrong value
        base[qid] = value
        result = run_answers(folder, base, *extra)
    else:
        assume(_as_set_value(value) != "")  # --set KEY= drops the answer (test_cli): not a wrong value
        base.pop(qid, None)
        result = run_answers(folder, base, *set_args({qid: _as_set_value(value)}), *extra)
    fragments = [qid]
    if qid == "deepspeed_config":  # the file's own errors name the file, not the key
        fragments = []
    assert_refused(result, folder / "out", *fragments, as_json=as_json)


@given(
    key=st.text(min_size=1, max_size=30).filter(lambda k: k.strip() not in TREE.question_ids and "=" not in k),
    value=st.text(max_size=30),
    as_json=st.booleans(),
)
@example(key="\\[", value="", as_json=True)  # rich reads "\\[" as an escaped "[": printed as typed
@example(key="[bold]x", value="", as_json=False)
@FUZZ
def test_an_unknown_key_is_one_clean_error(workspace: Callable[[], Path], key: str, value: str, as_json: bool) -> None:
    folder = workspace()
    extra = ["--output", "json"] if as_json else []
    via_set = run_answers(folder, NVIDIA, f"--set={key}={value}", *extra)
    assert_refused(via_set, folder / "out", "--set", as_json=as_json)
    via_file = run_answers(folder, {**NVIDIA, key: value}, *extra)
    assert_refused(via_file, folder / "out", "answers file", "unknown key", as_json=as_json)


@pytest.mark.parametrize(
    ("items", "fragments"),
    [
        (["offload"], ["--set 'offload'", "key=value"]),
        (["=cpu"], ["key=value"]),
        (["  =x"], ["key=value"]),
        (["gpu_mo\ndel=1"], ["unknown key 'gpu_mo\\ndel'"]),
        (["gpus_per_node=" + "9" * 5000], ["gpus_per_node"]),
        (["gpus_per_node=1e3"], ["gpus_per_node", "whole number"]),
        (["gpu_memory_gb=1e999"], ["gpu_memory_gb", "finite"]),
        (["gpu_memory_gb=nan"], ["gpu_memory_gb", "finite"]),
        (["gpu_memory_gb=-inf"], ["gpu_memory_gb", "finite"]),
        (["sequence_length=-0"], ["sequence_length", "at least 16"]),
        # "4k" of tokens is 4,096: the hint names that count, not the 4 before the suffix.
        (["sequence_length=4k"], ["sequence_length", "(write 4k as the number, 4096)"]),
        (["gpu_memory_gb=80GB"], ["gpu_memory_gb", "(the number alone, such as 80)"]),
        (["gpu_model=A100\udcff"], ["gpu_model", "UTF-8"]),
        (["gpu_model=x\x85evil: 1"], ["gpu_model", "control characters"]),
    ],
)
def test_bad_set_items(tmp_path: Path, items: list[str], fragments: list[str]) -> None:
    result = run_answers(
        tmp_path, {k: v for k, v in NVIDIA.items() if k != "gpu_model"}, *[f"--set={i}" for i in items]
    )
    assert_refused(result, tmp_path / "out", *fragments)


# ---------------------------------------------------------------------------------------------
# Malformed answers files: any text, any bytes, YAML tags, alias bombs, nesting, size
# ---------------------------------------------------------------------------------------------

YAML_TOKENS = st.sampled_from(
    [
        "target",
        "hardware",
        "gpus_per_node",
        "accelerate",
        "nvidia",
        "8",
        "-1",
        "1e999",
        ".nan",
        ".inf",
        "9" * 5000,
        "2024-13-45",
        ":",
        ": ",
        "- ",
        "? ",
        "[",
        "]",
        "{",
        "}",
        ",",
        "&a ",
        "*a",
        "<<: ",
        "!!python/object/apply:os.system ",
        "!!binary ",
        "!!set ",
        "!custom ",
        "'",
        '"',
        "#",
        "|",
        ">",
        "%YAML 1.1\n",
        "---\n",
        "...\n",
        "\n",
        "  ",
        "\t",
        "\\",
        "\x00",
        "\ufeff",
        "é",
    ]
)
YAMLISH = st.lists(YAML_TOKENS, max_size=40).map("".join)


@given(text=st.one_of(st.text(max_size=300), YAMLISH), as_json=st.booleans())
@example(text="", as_json=False)
@example(text="   \n# only a comment\n", as_json=False)
@example(text="- target\n- accelerate\n", as_json=True)
@example(text="target: [accelerate\n", as_json=False)
@example(text="gpus_per_node: " + "9" * 5000 + "\n", as_json=False)
@example(text="target: 2024-13-45\n", as_json=False)
@FUZZ
def test_any_text_as_answers_file_is_one_clean_error(workspace: Callable[[], Path], text: str, as_json: bool) -> None:
    folder = workspace()
    path = folder / "answers.yaml"
    path.write_text(text, encoding="utf-8")
    result = cli(
        "--answers", str(path), "--output-dir", str(folder / "out"), *(["--output", "json"] if as_json else [])
    )
    assert_refused(result, folder / "out", as_json=as_json)


@given(data=st.binary(max_size=300))
@example(data=b"\xff\xfe\x00t\x00a\x00r\x00g\x00e\x00t")
@example(data=b"target: accelerate\nhardware: \xc3\x28\n")
@example(data=b"\x00\x01\x02")
@FUZZ
def test_any_bytes_as_answers_file_is_one_clean_error(workspace: Callable[[], Path], data: bytes) -> None:
    folder = workspace()
    path = folder / "answers.yaml"
    path.write_bytes(data)
    line = assert_refused(cli("--answers", str(path), "--output-dir", str(folder / "out")), folder / "out")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        assert "not UTF-8" in line


TAGGED = [
    f"target: !!python/object/apply:os.system ['touch {MARKER}']\n",
    f"target: !!python/object/apply:subprocess.check_output [[touch, {MARKER}]]\n",
    f"!!python/object/apply:os.system ['touch {MARKER}']\n",
    f"- !!python/object/apply:os.system ['touch {MARKER}']\n",
    f"? !!python/object/apply:os.system ['touch {MARKER}']\n: x\n",
    "target: !!python/name:os.system\n",
    "target: !!python/module:os\n",
    "target: !!python/object/new:os.system [x]\n",
    "target: !!python/object:os.system {}\n",
    f"target: !<tag:yaml.org,2002:python/object/apply:os.system> ['touch {MARKER}']\n",
    f"%TAG !p! tag:yaml.org,2002:python/object/apply:\n---\ntarget: !p!os.system ['touch {MARKER}']\n",
    "target: !custom accelerate\n",
    "target: !!set {a, b}\n",
    "target: !!omap [{a: 1}]\n",
    "target: !!pairs [{a: 1}]\n",
    "gpu_model: !!binary aGVsbG8=\n",
    "gpu_model: !!timestamp 2001-12-14\n",
    "gpus_per_node: !!float .nan\n",
    "gpus_per_node: !!int x\n",
    "!!map {target: accelerate}\n",
    "--- !!python/object/apply:os.system\nargs: ['touch " + MARKER + "']\n",
]


@pytest.mark.parametrize("text", TAGGED)
def test_yaml_tags_never_construct_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.chdir(tmp_path)  # an executed payload would leave MARKER here
    path = tmp_path / "answers.yaml"
    key = text.split(":", 1)[0]
    if key in NVIDIA:  # the tagged value replaces a valid answer, so the tag is what is refused
        text = yaml.safe_dump({k: v for k, v in NVIDIA.items() if k != key}, sort_keys=False) + text
    path.write_text(text, encoding="utf-8")
    line = assert_refused(cli("--answers", str(path), "--output-dir", str(tmp_path / "out")), tmp_path / "out")
    assert "answers file" in line or re.search(r"^error: (gpu_model|gpus_per_node|target):", line), line
    assert not (tmp_path / MARKER).exists(), "a YAML tag ran a command"


def _billion_laughs() -> str:
    """The classic alias bomb: nine levels of nine aliases each (a billion 'lol's once expanded)."""
    names = "abcdefghij"
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for prev, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    return "\n".join(lines) + "\n"


LAUGHS = _billion_laughs()
YAML_PLACE = "<the parser's reason at a line and column>"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (LAUGHS, "anchors and aliases"),
        ("target: &t accelerate\nhardware: *t\n", "anchors and aliases"),
        ("base: &b {target: accelerate}\nother:\n  <<: *b\n", "merge keys"),
        ("<<: {target: accelerate}\nhardware: nvidia\n", "merge keys"),
        ("a: &a [*a]\n", "anchors and aliases"),
        ("target: accelerate\ntarget: axolotl\n", "duplicate key 'target'"),
        ("1: accelerate\n", "keys must be text"),
        ("? [a, b]\n: c\n", "keys must be text"),
        ("~: x\n", "keys must be text"),
        ("true: x\n", "keys must be text"),
        # The parser's own words differ between libyaml and PyYAML (and their releases): only the
        # place is asserted, and that the line names the file (see assert_refused's one line).
        ("target: accelerate\n---\ntarget: axolotl\n", YAML_PLACE),
        ("target:\taccelerate\n\tx: 1\n", YAML_PLACE),
        ("schema_version: 2\nanswers: {}\n", "schema_version must be 1"),
        ("schema_version: 1\nanswers: [target]\n", "'answers' must be a mapping"),
        ("schema_version: 1\nanswers: {}\nextra: 1\n", "schema_version must be 1"),
        ("gpus_per_node: .nan\n", "gpus_per_node: nan is not allowed; expected a whole number"),
        ("gpu_memory_gb: .inf\n", "finite"),
        ("gpu_memory_gb: -.inf\n", "finite"),
        ("gpu_memory_gb: .NaN\n", "finite"),
        ("gpus_per_node: 0x100\n", "256 is not allowed"),
    ],
)
def test_malformed_yaml_structures(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "answers.yaml"
    key = text.split(":", 1)[0]
    number = key in ("gpus_per_node", "gpu_memory_gb")  # complete the answers, so the number is what fails
    base = yaml.safe_dump({k: v for k, v in NVIDIA.items() if k != key}) if number else ""
    path.write_text(base + text, encoding="utf-8")
    result = cli("--answers", str(path), "--output-dir", str(tmp_path / "out"))
    if reason == YAML_PLACE:
        line = assert_refused(result, tmp_path / "out", f"answers file {path}, line ")
        assert re.search(r", line \d+, column \d+: \S", line), line
    else:
        assert_refused(result, tmp_path / "out", reason)


def _nested(depth: int, kind: str) -> str:
    if kind == "flow-list":
        return "[" * depth + "1" + "]" * depth
    return "{a: " * depth + "1" + "}" * depth


@given(depth=st.integers(min_value=MAX_DEPTH + 1, max_value=5000), kind=st.sampled_from(["flow-list", "flow-map"]))
@example(depth=MAX_DEPTH + 1, kind="flow-list")
@FEW
def test_deep_nesting_is_refused(workspace: Callable[[], Path], depth: int, kind: str) -> None:
    folder = workspace()
    path = folder / "answers.yaml"
    path.write_text("target: " + _nested(depth, kind) + "\n")
    assert_refused(cli("--answers", str(path), "--output-dir", str(folder / "out")), folder / "out", "nesting deeper")


def test_very_deep_nesting_does_not_crash_the_interpreter(tmp_path: Path) -> None:
    """libyaml's composer recursed until it crashed (SIGSEGV) on a 100,000-level flow list.

    In a child process, so that a regression fails this test instead of killing pytest.
    """
    depth = (MAX_ANSWERS_BYTES - 100) // 2
    path = tmp_path / "answers.yaml"
    path.write_text("target: " + "[" * depth + "]" * depth + "\n")
    block = tmp_path / "block.yaml"
    block.write_text("".join(" " * level + "k:\n" for level in range(700)))  # the deepest block nesting that fits
    for answers in (path, block):
        proc = subprocess.run(
            [sys.executable, "-m", "wizard", "--answers", str(answers), "--output-dir", str(tmp_path / "out")],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
        assert_one_error_line(proc.stderr, "nesting deeper than 64 levels")
        assert proc.stdout == "" and not (tmp_path / "out").exists()


def test_empty_answers_files_and_a_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for text in ("", "\n\n", "# nothing\n", "---\n", "~\n", "null\n", "--- # nothing\n"):
        path = tmp_path / "answers.yaml"
        path.write_text(text)
        assert_refused(cli("--answers", str(path), "--output-dir", str(out)), out, "is empty")
    # /dev/null reads as empty, but it is a device: refused as such, like /dev/zero (which never ends).
    assert_refused(cli("--answers", os.devnull, "--output-dir", str(out)), out, "is not a regular file")
    assert_refused(cli("--answers", str(tmp_path), "--output-dir", str(out)), out, "is a directory")
    assert_refused(cli("--answers", str(tmp_path / "missing.yaml"), "--output-dir", str(out)), out, "does not exist")
    for answers in (str(tmp_path), str(tmp_path / "missing.yaml")):
        assert_refused(
            cli("--answers", answers, "--output-dir", str(out), "--output", "json"), out, answers, as_json=True
        )


# ---------------------------------------------------------------------------------------------
# Valid but unusual text: written as one plain string value of its own field
# ---------------------------------------------------------------------------------------------

INJECTIONS = [
    'org/model: "x"\ndeepspeed_config_file: /etc/passwd',
    "a\ndeepspeed_config_file: /etc/passwd",
    "x\n  deepspeed: /etc/passwd\nfsdp_version: 1",
    "x\n---\nbase_model: other",
    "it's \"quoted\" and 'single'",
    "{{ 7*7 }}",
    "{{ cycler.__init__.__globals__.os.system('touch " + MARKER + "') }}",
    "{% for x in range(3) %}{{ x }}{% endfor %}",
    "{# comment #}",
    '{"deepspeed": "/etc/passwd"}',
    '", "deepspeed": "/etc/passwd',
    "key: value",
    "- item",
    "&anchor x",
    "*alias",
    "!!python/object/apply:os.system ['touch " + MARKER + "']",
    "# not a comment",
    "x # trailing",
    "null",
    "~",
    "yes",
    "NO",
    "1e3",
    "0x1F",
    "'",
    '"',
    "\\",
    "@at",
    "`tick`",
    "%percent",
    "$(touch " + MARKER + ")",
    "A100\u2028evil: 1",
    "\ufeffbom",
    "日本語のモデル",
    "emoji 🤖 model",
    "right-to-left \u202e",
    "tab\tseparated",
    "  leading and trailing  ",
    "trailing colon:",
    "x" * MAX_TEXT,
    "line one\nline two\n",
]
SAFE_CHARS = st.characters(exclude_categories=("Cs", "Cc"), include_characters="\t\n")
SAFE_TEXT = st.text(SAFE_CHARS, min_size=1, max_size=MAX_TEXT).filter(lambda t: bool(t.strip()))


@functools.cache
def reference_keys(tmp: str, mixed_precision: str) -> tuple[frozenset[str], frozenset[str]]:
    """Top-level keys of axolotl.yaml and answers.yaml for plain text values."""
    gpu = "A100" if mixed_precision == "bf16" else "V100"
    folder = Path(tempfile.mkdtemp(dir=tmp))
    data = {**BASES["axolotl"], "gpu_model": gpu, "base_model": "org/model"}
    code, _, err = run_answers(folder, data, "--output", "json")
    assert code == 0, err
    config = yaml.safe_load((folder / "out" / "axolotl.yaml").read_text(encoding="utf-8"))
    saved = yaml.safe_load((folder / "out" / "answers.yaml").read_text(encoding="utf-8"))
    return frozenset(config), frozenset(saved["answers"])


@given(base_model=SAFE_TEXT, gpu_model=SAFE_TEXT, via=st.sampled_from(["yaml", "json", "set"]))
@FUZZ
def test_unusual_text_stays_one_plain_string(
    workspace: Callable[[], Path], base_model: str, gpu_model: str, via: str
) -> None:
    check_text_round_trip(workspace(), base_model, gpu_model, via, replay=True)


@pytest.mark.parametrize("text", INJECTIONS)
@pytest.mark.parametrize("via", ["yaml", "set"])
def test_injection_attempts_stay_one_plain_string(tmp_path: Path, text: str, via: str) -> None:
    check_text_round_trip(tmp_path, text, text, via)


def test_a_json_answers_file_with_escaped_emoji(tmp_path: Path) -> None:
    path = tmp_path / "answers.json"
    path.write_text(json.dumps({**BASES["axolotl"], "base_model": "emoji 🤖"}), encoding="utf-8")  # ensure_ascii
    code, _, err = cli("--answers", str(path), "--output-dir", str(tmp_path / "out"), "--dry-run")
    assert code == 0, err


def check_text_round_trip(folder: Path, base_model: str, gpu_model: str, via: str, replay: bool = False) -> None:
    data = {**BASES["axolotl"], "gpu_model": gpu_model, "base_model": base_model}
    cwd = os.getcwd()
    os.chdir(folder)  # a payload that ran would leave MARKER here
    try:
        json_out = ("--output", "json")  # rich's tables are most of the time of a text run
        if via == "set":
            base = {k: v for k, v in data.items() if k not in ("gpu_model", "base_model")}
            sets = (f"--set=gpu_model={gpu_model}", f"--set=base_model={base_model}")
            result = run_answers(folder, base, *sets, *json_out)
        elif via == "json":
            path = folder / "answers.json"
            path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            result = cli("--answers", str(path), "--output-dir", str(folder / "out"), *json_out)
        else:
            result = run_answers(folder, data, *json_out)
        code, out, err = result
        assert code == 0, err
        assert "Traceback" not in err
        reported = json.loads(out)["answers"]
        assert reported["base_model"] == base_model and reported["gpu_model"] == gpu_model
        config_text = (folder / "out" / "axolotl.yaml").read_text(encoding="utf-8")
        config = yaml.safe_load(config_text)
        saved = yaml.safe_load((folder / "out" / "answers.yaml").read_text(encoding="utf-8"))
        assert config["base_model"] == base_model
        assert saved["answers"]["base_model"] == base_model and saved["answers"]["gpu_model"] == gpu_model
        mixed = "fp16" if config.get("fp16") else "bf16"
        config_keys, answer_keys = reference_keys(str(folder.parent), mixed)
        assert set(config) == config_keys, "user text added or removed a key"
        assert set(saved["answers"]) == answer_keys
        assert not (folder / MARKER).exists()
        if replay:  # replaying the saved answers gives the same files, byte for byte
            again = cli(
                "--answers", str(folder / "out" / "answers.yaml"), "--output-dir", str(folder / "out"), *json_out
            )
            assert again[0] == 0, again[2]
            assert {f["action"] for f in json.loads(again[1])["files"]} == {"unchanged"}, "replay changed a value"
    finally:
        os.chdir(cwd)


# ---------------------------------------------------------------------------------------------
# DeepSpeed JSON and config.json inputs
# ---------------------------------------------------------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30), st.floats(), st.text(max_size=10)
)
PRINTABLE_KEYS = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(PRINTABLE_KEYS, inner, max_size=3),
    max_leaves=10,
)
NOT_OBJECT = st.one_of(JSON_SCALARS, st.lists(JSON_SCALARS, max_size=3))  # anything but a JSON object
OFFLOAD = st.fixed_dictionaries(
    {},
    optional={
        "device": st.one_of(st.sampled_from(["none", "cpu", "nvme", "CPU", "gpu", ""]), NOT_OBJECT),
        "nvme_path": st.one_of(st.sampled_from(["/local_nvme", ""]), NOT_OBJECT),
        "pin_memory": st.booleans(),
    },
)
ZERO = st.fixed_dictionaries(
    {},
    optional={
        "stage": st.one_of(st.sampled_from([0, 1, 2, 3, 2.0, 3.5, -1, 4, "2", "auto", True]), NOT_OBJECT),
        "offload_optimizer": st.one_of(OFFLOAD, NOT_OBJECT),
        "offload_param": st.one_of(OFFLOAD, NOT_OBJECT),
    },
)
DS_CONFIG = st.fixed_dictionaries(
    {"zero_optimization": st.one_of(ZERO, NOT_OBJECT, JSON_VALUES)},
    optional={
        "bf16": st.one_of(st.fixed_dictionaries({"enabled": st.one_of(st.booleans(), st.just("auto"))}), JSON_VALUES),
        "fp16": st.one_of(st.fixed_dictionaries({"enabled": st.one_of(st.booleans(), st.just("auto"))}), JSON_VALUES),
        "train_batch_size": st.one_of(st.just("auto"), st.integers(min_value=-4, max_value=64), JSON_VALUES),
        "train_micro_batch_size_per_gpu": st.one_of(st.just("auto"), st.integers(min_value=-4, max_value=4)),
        "gradient_accumulation_steps": st.one_of(st.just("auto"), st.integers(min_value=-4, max_value=8)),
    },
)
JSON_TOKENS = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        ":",
        ",",
        '"zero_optimization"',
        '"stage"',
        '"a"',
        "2",
        "-0",
        "1e999",
        "NaN",
        "Infinity",
        "true",
        "null",
        '"',
        "\\",
        "\\u00",
        "\\ud800",
        " ",
        "\n",
        "//",
        "/*",
        "'",
        "\x00",
        "9" * 5000,
    ]
)
JSONISH = st.lists(JSON_TOKENS, max_size=40).map("".join)


def run_with_deepspeed(folder: Path, content: str | bytes) -> tuple[int, str, str]:
    ds = folder / "ds.json"
    if isinstance(content, bytes):
        ds.write_bytes(content)
    else:
        ds.write_text(content, encoding="utf-8")
    return run_answers(folder, {**NVIDIA, "deepspeed_config": str(ds)}, "--output", "json", "--dry-run")


SELF_CHECK_REFUSED = 6  # the wizard's own output failing its checks (only a broken tree can do that)


def check_deepspeed_outcome(folder: Path, result: tuple[int, str, str], refused: tuple[int, ...] = (2,)) -> None:
    """Decided with an integer stage, or refused (one line naming the file, nothing written)."""
    code, out, _ = result
    if code == 0:
        rec = json.loads(out)["recommendation"]
        assert rec["backend"] == "deepspeed"
        assert type(rec["zero_stage"]) is int and rec["zero_stage"] in (0, 1, 2, 3), rec
        assert rec["offload_optimizer"] in ("none", "cpu", "nvme") and rec["offload_param"] in ("none", "cpu", "nvme")
    else:
        assert code in refused, (code, result[2])
        assert_refused(result, folder / "out", "ds.json", code=code, as_json=True)


@given(zero=st.one_of(ZERO, NOT_OBJECT))
@example(zero={"stage": 2.0})
@example(zero={"stage": "2"})
@example(zero={"stage": math.nan})
@example(zero={"stage": 3, "offload_param": {"device": "nvme"}})
@example(zero={"stage": 3, "offload_param": {"device": "nvme", "nvme_path": 5}})
@example(zero={"stage": 2, "offload_optimizer": {"device": None}})
@example(zero={"stage": 2, "offload_optimizer": {"device": "CPU"}})
@example(zero={"stage": 2, "offload_optimizer": True})
@example(zero={"stage": 2, "offload_optimizer": 0})
@example(zero=[])
@FUZZ
def test_wrong_types_in_zero_optimization_are_input_errors(workspace: Callable[[], Path], zero: Any) -> None:
    """What decides the backend (stage, offload blocks and devices) is checked on input: exit 2."""
    folder = workspace()
    check_deepspeed_outcome(folder, run_with_deepspeed(folder, json.dumps({"zero_optimization": zero})))


@given(config=DS_CONFIG)
@FUZZ
def test_any_deepspeed_config_values_are_decided_or_refused_cleanly(
    workspace: Callable[[], Path], config: dict[str, Any]
) -> None:
    folder = workspace()
    result = run_with_deepspeed(folder, json.dumps(config))
    check_deepspeed_outcome(folder, result, refused=(2,))


def test_a_control_character_in_an_unknown_deepspeed_key(tmp_path: Path) -> None:
    result = run_with_deepspeed(tmp_path, json.dumps({"zero_optimization": {"stage": 2, "a\nb": 1}}))
    check_deepspeed_outcome(tmp_path, result, refused=(2,))


@given(text=st.one_of(JSONISH, st.text(max_size=200)))
@example(text="")
@example(text='{"zero_optimization": {"stage": ' + "1" * 5000 + "}}")
@example(text='{"zero_optimization": {"stage": 2}, "zero_optimization": {"stage": 3}}')
@example(text='{"zero_optimization": {"stage": 2, "stage": 2}}')
@example(text='{"zero_optimization": {"stage": 2}} trailing')
@example(text='{"zero_optimization": {"stage": NaN}}')
@example(text="\ufeff{}")
@FUZZ
def test_any_text_as_deepspeed_config_is_decided_or_refused_cleanly(workspace: Callable[[], Path], text: str) -> None:
    folder = workspace()
    check_deepspeed_outcome(folder, run_with_deepspeed(folder, text), refused=(2,))


@given(data=st.binary(max_size=200))
@example(data=b"\xff\xfe{\x00}\x00")
@FEW
def test_any_bytes_as_deepspeed_config(workspace: Callable[[], Path], data: bytes) -> None:
    folder = workspace()
    check_deepspeed_outcome(folder, run_with_deepspeed(folder, data))


@given(path=st.lists(st.sampled_from(["zero_optimization", "offload_param", "bf16", "a"]), min_size=0, max_size=3))
@FEW
def test_duplicate_keys_at_any_depth_are_refused(workspace: Callable[[], Path], path: list[str]) -> None:
    folder = workspace()
    inner = '"k": 1, "k": 2'
    for key in reversed(path):
        inner = f'"{key}": {{{inner}}}'
    text = '{"zero_optimization": {"stage": 2}, "x": {' + inner + "}}"
    assert_refused(run_with_deepspeed(folder, text), folder / "out", "ds.json", "duplicate key 'k'", as_json=True)


@given(depth=st.integers(min_value=1, max_value=100_000), kind=st.sampled_from(["list", "dict"]))
@example(depth=900, kind="dict")
@example(depth=990, kind="dict")
@example(depth=100_000, kind="list")
@FEW
def test_deeply_nested_deepspeed_config(workspace: Callable[[], Path], depth: int, kind: str) -> None:
    folder = workspace()
    nested = "[" * depth + "]" * depth if kind == "list" else '{"a": ' * depth + "1" + "}" * depth
    check_deepspeed_outcome(
        folder, run_with_deepspeed(folder, '{"zero_optimization": {"stage": 2}, "x": ' + nested + "}")
    )


def test_deepspeed_config_that_is_a_directory_or_missing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for path, reason in ((tmp_path, "is a directory"), (tmp_path / "nope.json", "does not exist")):
        result = run_answers(tmp_path, {**NVIDIA, "deepspeed_config": str(path)})
        assert_refused(result, out, str(path), reason)


LLAMA = {
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
}
CONFIG_FIELDS = st.fixed_dictionaries(
    {
        key: st.one_of(st.just(value), st.integers(min_value=-5, max_value=10**40), st.just(10**4000), JSON_VALUES)
        for key, value in LLAMA.items()
    },
    optional={
        "head_dim": st.one_of(st.integers(min_value=-1, max_value=10**6), JSON_VALUES),
        "num_local_experts": st.one_of(st.integers(min_value=-1, max_value=10**6), JSON_VALUES),
        "num_experts_per_tok": st.one_of(st.integers(min_value=-1, max_value=10**6), JSON_VALUES),
        "tie_word_embeddings": JSON_VALUES,
        "architectures": JSON_VALUES,
        "layer_class": JSON_VALUES,
        "text_config": JSON_VALUES,
    },
)


@given(config=CONFIG_FIELDS, as_folder=st.booleans())
@example(config={**LLAMA, "hidden_size": 10**200}, as_folder=True)
@example(config={**LLAMA, "num_attention_heads": 10**6}, as_folder=False)
@example(config={**LLAMA, "num_local_experts": 8, "num_experts_per_tok": 10**30}, as_folder=False)
@FUZZ
def test_any_config_json_is_measured_or_refused_cleanly(
    workspace: Callable[[], Path], config: dict[str, Any], as_folder: bool
) -> None:
    folder = workspace()
    (folder / "model").mkdir()
    path = folder / "model" / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    given_as = str(path.parent if as_folder else path)
    result = run_answers(folder, {**NVIDIA, "model": given_as}, "--output", "json", "--dry-run")
    code, out, err = result
    if code in (0, 4):
        from wizard.report import RESULT_SCHEMA_VERSION

        assert json.loads(out)["schema_version"] == RESULT_SCHEMA_VERSION
        assert "Traceback" not in err
    else:
        assert_refused(result, folder / "out", "model", as_json=True)


@given(text=st.one_of(JSONISH, st.text(max_size=100)))
@example(text='{"hidden_size": ' + "1" * 5000 + "}")
@example(text="[" * 100_000 + "]" * 100_000)
@FEW
def test_any_text_as_config_json(workspace: Callable[[], Path], text: str) -> None:
    folder = workspace()
    path = folder / "config.json"
    path.write_text(text, encoding="utf-8")
    result = run_answers(folder, {**NVIDIA, "model": str(path)})
    assert_refused(result, folder / "out", "model")


# ---------------------------------------------------------------------------------------------
# A broken decision tree (--tree FILE) is untrusted input
# ---------------------------------------------------------------------------------------------

TREE_LINES = SHIPPED_TREE.read_text(encoding="utf-8").splitlines(keepends=True)
TREE_TEXT = "".join(TREE_LINES)
OPERATORS = ["eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte", "set", "is", "eqq", "all", "any", "not"]
IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
GARBAGE = st.one_of(
    YAMLISH,
    st.sampled_from(
        [
            "  - id: extra\n",
            "    when: {fact: no_such_fact, eq: true}\n",
            '    because: "{{ nope }}"\n',
            "    because: \"{{ ''.__class__.__mro__ }}\"\n",
            "    outcome: {backend: warp_drive}\n",
            "\tbad: tab\n",
            "  &x anchor: 1\n",
            "schema_version: 2\n",
        ]
    ),
)


@st.composite
def mutated_tree(draw: st.DrawFn) -> tuple[str, list[str]]:
    """The shipped tree with 1-3 random edits, and a description of each."""
    lines = list(TREE_LINES)
    notes = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(
            st.sampled_from(["delete", "swap", "duplicate", "insert", "id", "operator", "name", "number", "indent"])
        )
        i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        if kind == "delete":
            del lines[i]
        elif kind == "swap":
            j = draw(st.integers(min_value=0, max_value=len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "insert":
            lines.insert(i, draw(GARBAGE) + "\n")
        elif kind == "indent":
            lines[i] = draw(st.sampled_from(["  ", " ", "\t"])) + lines[i] if draw(st.booleans()) else lines[i].lstrip()
        else:
            pattern = {
                "id": r"\bid: (\w+)",
                "operator": r"\b(eq|ne|in|not_in|gt|gte|lt|lte|set): ",
                "name": r"\b(?:fact|answer): (\w+)",
                "number": r": (-?\d+(?:\.\d+)?)\b",
            }[kind]
            hits = [(n, m) for n, line in enumerate(lines) for m in re.finditer(pattern, line)]
            if not hits:
                continue
            n, match = hits[draw(st.integers(min_value=0, max_value=len(hits) - 1))]
            if kind == "operator":
                new = draw(st.sampled_from(OPERATORS))
            elif kind == "number":
                new = draw(st.sampled_from(["0", "-1", "1e999", ".nan", "999999999999", "true", "'x'"]))
            else:
                new = draw(
                    st.one_of(IDENT, st.sampled_from([q.id for q in TREE.questions] + ["fits_ddp", "world_size"]))
                )
            lines[n] = lines[n][: match.start(1)] + new + lines[n][match.end(1) :]
            i = n
        notes.append(f"{kind} at line {i + 1}")
    return "".join(lines), notes


TREE_ERROR = re.compile(r"^error: (?P<file>.+?), line (?P<line>\d+)(?:, column \d+)?: \S")


def run_tree(folder: Path, tree_text: str, answers: Path, *extra: str) -> tuple[Path, tuple[int, str, str]]:
    """Run with --tree (and --output json: rich's tables are most of the time of a text run)."""
    path = folder / "decision_tree.yaml"
    path.write_text(tree_text, encoding="utf-8")
    argv = ["--tree", str(path), "--answers", str(answers), "--output-dir", str(folder / "out"), "--output", "json"]
    return path, cli(*argv, *extra)


def assert_tree_refused(result: tuple[int, str, str], path: Path, out_dir: Path) -> int:
    """Exit 3, one line "FILE, line N: reason"; returns N."""
    line = assert_refused(result, out_dir, code=3, as_json=True)
    match = TREE_ERROR.match(line)
    assert match and match["file"] == str(path), line
    return int(match["line"])


@given(mutation=mutated_tree(), answers=st.sampled_from(EXAMPLES))
@settings(FUZZ, max_examples=50)
def test_a_mutated_tree_is_refused_with_its_line_or_still_behaves(
    workspace: Callable[[], Path], mutation: tuple[str, list[str]], answers: Path
) -> None:
    folder = workspace()
    text, _notes = mutation
    path, result = run_tree(folder, text, answers, "--dry-run")
    code, out, err = result
    if code == 3:
        line = assert_tree_refused(result, path, folder / "out")
        assert 1 <= line <= text.count("\n") + 1
    elif code == 2:  # the edit changed a question, and the example's answer no longer fits it
        assert_refused(result, folder / "out", as_json=True)
    elif code == SELF_CHECK_REFUSED:  # the edit made the tree decide a config the checks refuse
        assert_refused(result, folder / "out", "refusing to write", code=code, as_json=True)
    else:
        assert code in (0, 4), (code, err)
        assert "Traceback" not in err
        assert json.loads(out)["recommendation"]["refused"] == (code == 4)
        assert not (folder / "out").exists()
        if code == 4:
            assert_one_error_line(err, "no backend fits")


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_renamed_question_a_failed_rule_still_reads_is_refused_before_anything_is_written(
    tmp_path: Path, dry_run: bool
) -> None:
    """A failed rule's sentence is rendered when the report first reads it: a tree text that names a question the
    tree no longer has still ends the run with exit 3 and one line naming the text's line, and writes nothing."""
    shipped = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")
    text = shipped.replace("  - id: context_parallel_size\n", "  - id: zzz_renamed\n", 1)
    assert text != shipped
    answers = REPO / "examples" / "a100-7b-full-offload-accelerate.yaml"
    path, result = run_tree(tmp_path, text, answers, *(["--dry-run"] if dry_run else []))
    line = assert_tree_refused(result, path, tmp_path / "out")
    assert "context_parallel_size' is undefined" in result[2], result[2]
    # The line named is the text's own: it reads the answer the tree no longer asks.
    assert "context" in " ".join(text.splitlines()[line - 1 : line + 3]), line
    assert not (tmp_path / "out").exists()


def _replace_once(text: str, old: str, new: str) -> tuple[str, int]:
    assert text.count(old) >= 1, old
    line = text[: text.index(old)].count("\n") + 1
    return text.replace(old, new, 1), line


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("- {fact: fits_fsdp2, eq: true}", "- {fact: fits_everything, eq: true}", "unknown fact 'fits_everything'"),
        (
            "{answer: cpu_processes, gt: 1}]}\n    outcome",
            "{answer: cpu_processe, gt: 1}]}\n    outcome",
            "unknown answer",
        ),
        (
            "{answer: hardware, eq: mps}",
            "{answer: hardware, eqq: mps}",
            "exactly one of answer/fact/outcome and one operator",
        ),
        ("{answer: hardware, eq: mps}", "{answer: hardware, eq: warp}", "'warp' is not a choice of hardware"),
        ("{answer: hardware, eq: mps}", "{answer: hardware, gt: mps}", "'gt' needs a number"),
        ("outcome: {backend: multi_cpu}", "outcome: {backend: warp_drive}", "unknown backend 'warp_drive'"),
        ("  - id: cpu_multi_process", "  - id: cpu_single_process", "duplicate rule id"),
        ("  - id: num_nodes", "  - id: 'num nodes'", "must be an identifier"),
        ('because: "This run trains on the CPU in one process.', 'because: "{{ oops', "bad template"),
        ("    type: integer\n    default: 1\n    min: 1\n    max: 1024", "    type: integr", "type must be one of"),
        ("guidance: H5\n", "guidance: H99\n", "unknown guidance id 'H99'"),
        (
            "when: {answer: hardware, eq: tpu}\n\n  - id: gpu_model",
            "when: [1, 2]\n\n  - id: gpu_model",
            "a condition must be a mapping",
        ),
        ("  - id: target\n", "  - id: target\n\tbad: tab\n", ""),
    ],
)
def test_broken_tree_names_file_and_line(tmp_path: Path, old: str, new: str, reason: str) -> None:
    text, line = _replace_once(TREE_TEXT, old, new)
    path, result = run_tree(tmp_path, text, EXAMPLES[0])
    reported = assert_tree_refused(result, path, tmp_path / "out")
    assert reason in result[2]
    assert abs(reported - line) <= 12, (reported, line, result[2])


@pytest.mark.parametrize("where", ["title", "source", "guidance"])
def test_tree_text_cannot_inject_keys_into_the_outputs(tmp_path: Path, where: str) -> None:
    """Backend titles and source/guidance tags are pasted into every file's header comment."""
    data = json.loads(_shipped_tree_data())
    evil = "X\ngpu_ids: '0'"  # a real Accelerate key, so no later check would notice it
    rule = next(r for r in data["rules"] if r["id"] == "sharded_fsdp2")
    if where == "title":
        data["backends"]["fsdp2"]["title"] = evil
    elif where == "source":
        data["sources"][evil] = "injected"
        rule["sources"] = [evil]
    else:
        data["guidance"][evil] = "injected"
        rule["guidance"] = evil
    answers = REPO / "examples" / "a100x4-7b-full-accelerate.yaml"  # sharded_fsdp2 decides
    path, result = run_tree(tmp_path, yaml.safe_dump(data, sort_keys=False), answers)
    assert_tree_refused(result, path, tmp_path / "out")
    assert "one line" in result[2]


def test_tree_that_is_missing_a_directory_empty_or_binary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    for tree_arg, reason in (
        (tmp_path, "is a directory"),
        (tmp_path / "none.yaml", "does not exist"),
        (binary, "UTF-8"),
    ):
        result = cli("--tree", str(tree_arg), "--answers", str(EXAMPLES[0]), "--output-dir", str(out))
        assert_refused(result, out, "decision tree", str(tree_arg), reason, code=3)
    for text in ("", "[]", "schema_version: 1\n"):
        path, result = run_tree(tmp_path, text, EXAMPLES[0])
        assert_tree_refused(result, path, out)


SANDBOX_ESCAPES = [
    "{{ ''.__class__.__mro__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ cycler.__init__.__globals__.os.system('touch " + MARKER + "') }}",
    "{{ lipsum.__globals__['os'].popen('touch " + MARKER + "').read() }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ self.__init__.__globals__ }}",
    "{{ ''|attr('__class__') }}",
    "{{ '{0.__class__}'.format('') }}",
    "{{ range.__self__ }}",
    "{{ nope }}",
    "{{ config }}",
    "{{ est.nope.total_gib }}",
    "{{ 1 / 0 }}",
    "{{ 'a' + 1 }}",
    "{% for x in range(10**9) %}{% endfor %}",
    "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}",
]


@functools.cache
def _shipped_tree_data() -> str:
    return json.dumps(yaml.load(TREE_TEXT, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def _tree_with_texts(payload: str, where: str) -> str:
    """The shipped tree with `payload` as every rule's because, every fact text, or every help."""
    data = json.loads(_shipped_tree_data())
    if where == "because":
        for rule in data["rules"]:
            rule["because"] = payload
    elif where == "facts":
        for fact in data["facts"].values():
            fact["holds"] = fact["fails"] = payload
    else:
        for question in data["questions"]:
            question["help"] = payload
    _drop_unused_texts(data)
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True, width=2**16)


def _drop_unused_texts(data: dict[str, Any]) -> None:
    """Leave out the shared texts that only the replaced texts included: the linter refuses unused ones."""
    texts = data.get("texts", {})
    while True:
        rest = json.dumps({key: value for key, value in data.items() if key != "texts"})
        used = set(re.findall(r"texts\.(\w+)", rest))
        used |= {ref for name, text in texts.items() for ref in re.findall(r"texts\.(\w+)", text) if ref != name}
        unused = set(texts) - used
        if not unused:
            return
        for name in unused:
            del texts[name]


@pytest.mark.parametrize("payload", SANDBOX_ESCAPES)
@pytest.mark.parametrize("where", ["because", "facts"])
def test_tree_texts_cannot_escape_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, payload: str, where: str
) -> None:
    monkeypatch.chdir(tmp_path)
    answers = REPO / "examples" / "a100-7b-full-offload-accelerate.yaml"  # its trace renders fact texts
    path, result = run_tree(tmp_path, _tree_with_texts(payload, where), answers)
    assert_tree_refused(result, path, tmp_path / "out")
    assert "cannot be rendered" in result[2] or "unknown value" in result[2]
    assert not (tmp_path / MARKER).exists(), "a tree text ran a command"


@pytest.mark.parametrize("payload", SANDBOX_ESCAPES[:5])
def test_help_texts_are_shown_never_rendered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, payload: str) -> None:
    monkeypatch.chdir(tmp_path)
    _, (code, _, err) = run_tree(tmp_path, _tree_with_texts(payload, "help"), EXAMPLES[0], "--dry-run")
    assert code == 0, err
    assert not (tmp_path / MARKER).exists()


def test_render_errors_without_a_location_still_name_the_tree() -> None:
    with pytest.raises(TextError, match=r"^decision tree: text .* unknown value"):
        render_text("{{ nope }}", {})


# ---------------------------------------------------------------------------------------------
# Input limits (docs/usage.md, "Input limits"): just under works, just over is a clear error
# ---------------------------------------------------------------------------------------------


def _padded(text: str, size: int) -> str:
    """`text` plus a trailing comment, exactly `size` bytes in UTF-8."""
    body = text if text.endswith("\n") else text + "\n"
    pad = size - len(body.encode("utf-8")) - 2
    assert pad >= 0
    return body + "#" + "x" * pad + "\n"


@pytest.mark.parametrize("over", [False, True])
def test_answers_file_size_limit(tmp_path: Path, over: bool) -> None:
    path = tmp_path / "answers.yaml"
    path.write_text(_padded(yaml.safe_dump(NVIDIA), MAX_ANSWERS_BYTES + over), encoding="utf-8")
    assert path.stat().st_size == MAX_ANSWERS_BYTES + over
    result = cli("--answers", str(path), "--output-dir", str(tmp_path / "out"), "--dry-run")
    if over:
        assert_refused(result, tmp_path / "out", str(path), "the limit is 262,144")
    else:
        assert result[0] == 0, result[2]


@pytest.mark.parametrize("over", [False, True])
def test_deepspeed_json_size_limit(tmp_path: Path, over: bool) -> None:
    text = '{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}'
    content = text + " " * (MAX_JSON_BYTES + over - len(text))
    result = run_with_deepspeed(tmp_path, content)
    if over:
        assert_refused(result, tmp_path / "out", "ds.json", "the limit is 1,048,576", as_json=True)
    else:
        assert result[0] == 0, result[2]


@pytest.mark.parametrize("over", [False, True])
def test_config_json_size_limit(tmp_path: Path, over: bool) -> None:
    text = json.dumps(LLAMA)
    path = tmp_path / "config.json"
    path.write_text(text + " " * (MAX_JSON_BYTES + over - len(text)), encoding="utf-8")
    result = run_answers(tmp_path, {**NVIDIA, "model": str(path)}, "--dry-run")
    if over:
        assert_refused(result, tmp_path / "out", "model", "the limit is 1,048,576")
    else:
        assert result[0] == 0, result[2]


@pytest.mark.parametrize("over", [False, True])
def test_tree_size_limit(tmp_path: Path, over: bool) -> None:
    path, result = run_tree(tmp_path, _padded(TREE_TEXT, MAX_TREE_BYTES + over), EXAMPLES[0], "--dry-run")
    assert path.stat().st_size == MAX_TREE_BYTES + over
    if over:
        assert_refused(result, tmp_path / "out", "decision tree", "the limit is 1,048,576", code=3, as_json=True)
    else:
        assert result[0] == 0, result[2]


@pytest.mark.parametrize("key", ["gpu_model", "base_model"])
def test_text_length_limit(tmp_path: Path, key: str) -> None:
    base = BASES["axolotl"]
    ok = run_answers(tmp_path, {**base, key: "x" * MAX_TEXT}, "--dry-run")
    assert ok[0] == 0, ok[2]
    over = run_answers(tmp_path, {**base, key: "x" * (MAX_TEXT + 1)})
    assert_refused(over, tmp_path / "out", key, f"limited to {MAX_TEXT} characters")


def test_yaml_nesting_limit(tmp_path: Path) -> None:
    assert parse_yaml("[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH) is not None
    with pytest.raises(YamlProblem, match="nesting deeper than 64 levels"):
        parse_yaml("[" * (MAX_DEPTH + 1) + "1" + "]" * (MAX_DEPTH + 1))
    # In an answers file the top mapping is one level: just under the limit the value is refused
    # for what it is (not a single value); just over, for its depth.
    for depth, reason in ((MAX_DEPTH - 1, "expected a single value"), (MAX_DEPTH, "nesting deeper")):
        path = tmp_path / "answers.yaml"
        path.write_text("target: " + "[" * depth + "1" + "]" * depth + "\n")
        assert_refused(cli("--answers", str(path), "--output-dir", str(tmp_path / "out")), tmp_path / "out", reason)


def test_limits_match_the_usage_page() -> None:
    page = (REPO / "docs" / "usage.md").read_text(encoding="utf-8")
    assert "answers file 256 KiB" in page and MAX_ANSWERS_BYTES == 256 * 1024
    assert "DeepSpeed JSON and config.json 1 MiB" in page and MAX_JSON_BYTES == 1024 * 1024
    assert "decision tree 1 MiB" in page and MAX_TREE_BYTES == 1024 * 1024
    assert f"text answers {MAX_TEXT} characters" in page
    assert f"YAML nesting {MAX_DEPTH} levels (JSON nesting too" in page
    assert "Only regular files are read" in page
    from wizard.engine import deepspeed_json

    assert deepspeed_json.MAX_JSON_BYTES == MAX_JSON_BYTES, "the engine's own cap must not be lower"


def test_the_shipped_tree_loads_from_its_own_text() -> None:
    assert load_tree(TREE_TEXT, "decision_tree.yaml").question_ids == TREE.question_ids


@pytest.mark.parametrize(
    ("text", "reason"),
    [("{{ 'x' * 10**10 }}", "repeating text"), ("{{ 9 ** 9 ** 9 }}", "powers above 64")],
)
def test_tree_texts_cannot_build_huge_values(tmp_path: Path, text: str, reason: str) -> None:
    tree_file = tmp_path / "tree.yaml"
    shipped = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")
    tree_file.write_text(shipped.replace('because: "One GPU, and the', f'because: "{text} One GPU, and the', 1))
    answers = tmp_path / "a.yaml"
    answers.write_text(yaml.safe_dump({**BASES["axolotl"]}))
    code, _, err = cli("--tree", str(tree_file), "--answers", str(answers), "--output-dir", str(tmp_path / "o"))
    assert code == 3 and reason in err and err.count("\n") == 1


def test_schema_version_must_be_an_integer(tmp_path: Path) -> None:
    path = tmp_path / "answers.yaml"
    path.write_text("schema_version: true\nanswers: {target: accelerate}\n")
    code, _, err = cli("--answers", str(path), "--output-dir", str(tmp_path / "out"))
    assert code == 2 and "schema_version must be 1" in err


@pytest.mark.parametrize("name", ["micro_batch_size", "sequence_length", "gpu_memory_gb", "method"])
def test_a_tree_without_a_question_the_wizard_reads_by_name_is_refused_at_its_questions(
    tmp_path: Path, name: str
) -> None:
    """The estimate and the files read some answers by name: a tree that renames one of those questions ends with
    exit 3 and one line naming the tree's questions line and the question, never a traceback, and writes nothing."""
    from wizard.engine.tree import ENGINE_QUESTIONS

    assert name in ENGINE_QUESTIONS
    shipped = (REPO / "decision_tree.yaml").read_text(encoding="utf-8")
    text = shipped.replace(f"  - id: {name}\n", "  - id: zzz_renamed\n", 1)
    assert text != shipped
    answers = REPO / "examples" / "cpu-4proc-accelerate.yaml"
    path, result = run_tree(tmp_path, text, answers, "--dry-run")
    line = assert_tree_refused(result, path, tmp_path / "out")
    assert name in result[2], result[2]
    if name in ("method", "sequence_length"):
        return  # the tree's own facts and texts read these two: its reference check names them first
    assert text.splitlines()[line - 1].startswith("questions:"), line
    assert f"no question {name!r}, which the wizard reads by name" in result[2]
