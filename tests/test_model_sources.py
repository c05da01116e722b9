"""The resolved model reaches the output: base_model, the FSDP layer class, the summary's source line.

Also: names without an org ("Llama-3-8B", "mistral 7b") are the bundled catalog's models, with a
did-you-mean for a near miss.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_hub_model import lay_out_cache

from helpers import REPO, decide, file
from wizard.engine.advice import model_assumption
from wizard.engine.model_size import ModelSizeError, catalog_model, parse_model_size, shape_for_model
from wizard.errors import InvalidAnswerError, ModelUnavailableError

CONFIGS = REPO / "tests" / "assets" / "configs"
FSDP_RUN = {
    "target": "accelerate",
    "hardware": "nvidia",
    "gpu_model": "A100 80GB",
    "gpus_per_node": 4,
    "num_nodes": 1,
    "method": "full",
    "sequence_length": 4096,
    "micro_batch_size": 1,
}
AXOLOTL_RUN = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "A100 80GB",
    "gpus_per_node": 1,
    "method": "lora",
    "sequence_length": 2048,
}


def config_text(name: str) -> bytes:
    return (CONFIGS / f"{name}.json").read_bytes()


@pytest.fixture
def hub_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An HF_HOME whose cache holds acme/pythia (Pythia-12B's config.json) at main and at v1."""
    home = tmp_path / "hf"
    lay_out_cache(home, "acme/pythia", {"config.json": config_text("EleutherAI--pythia-12b")})
    (home / "hub" / "models--acme--pythia" / "refs" / "v1").write_text(
        (home / "hub" / "models--acme--pythia" / "refs" / "main").read_text()
    )
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


# --- names without an org: the bundled catalog ----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "params"),
    [
        ("Llama-3-8B", "llama-3-8b", 8_030_261_248),
        ("mistral 7b", "mistral-7b", 7_241_732_096),
        ("Meta-Llama-3-8B-Instruct", "llama-3-8b", 8_030_261_248),
        ("llama_2_7b_hf", "llama-2-7b", 6_738_415_616),
    ],
)
def test_a_catalog_name_is_its_model(text: str, name: str, params: int) -> None:
    assert catalog_model(text) == name
    assert parse_model_size(text) == params
    shape = shape_for_model(text)
    assert shape.params == params and shape.reference is None and shape.layer_class is not None


def test_a_near_miss_gets_a_did_you_mean() -> None:
    with pytest.raises(ModelSizeError, match=r"did you mean llama-3-8b\?"):
        parse_model_size("lama-3-8b")
    with pytest.raises(ModelSizeError) as caught:
        parse_model_size("gpt-17")
    assert "did you mean" not in str(caught.value) and "Hub id" in str(caught.value)


def test_sizes_keep_their_reference_shape_beside_named_models() -> None:
    # mistral-7b is a named model only: "7B" still borrows Llama 2's layer shape.
    assert shape_for_model("7B").reference == "llama-2-7b"


def test_a_catalog_name_sets_the_fsdp_layer_class(tmp_path: Path) -> None:
    result = decide({**FSDP_RUN, "model": "mistral 7b"}, tmp_path / "out")
    assert result.recommendation.backend == "fsdp2"
    config = yaml.safe_load(file(result, "accelerate_config.yaml").text)
    assert config["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == "MistralDecoderLayer"
    said = model_assumption(result.session.answers, result.recommendation.facts)
    assert "of mistral-7b, counted from the bundled catalog" in said, said


def test_a_local_folder_named_like_a_catalog_model_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "llama-3-8b").mkdir()
    (tmp_path / "llama-3-8b" / "config.json").write_bytes(config_text("EleutherAI--pythia-12b"))
    monkeypatch.chdir(tmp_path)
    result = decide({**FSDP_RUN, "model": "llama-3-8b"}, tmp_path / "out")
    assert result.recommendation.facts.shape is not None
    assert result.recommendation.facts.shape.params == 11_846_072_320


# --- the architecture reaches the FSDP config --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("EleutherAI--pythia-12b", "GPTNeoXLayer"),
        ("google--gemma-2-9b", "Gemma2DecoderLayer"),
        ("Qwen--Qwen3-8B", "Qwen3DecoderLayer"),
    ],
)
def test_the_fsdp_layer_class_comes_from_the_architecture(tmp_path: Path, name: str, layer: str) -> None:
    config = tmp_path / "config.json"
    config.write_bytes(config_text(name))
    result = decide({**FSDP_RUN, "model": str(config)}, tmp_path / "out")
    assert result.recommendation.backend == "fsdp2"
    rendered = yaml.safe_load(file(result, "accelerate_config.yaml").text)
    assert rendered["fsdp_config"]["fsdp_transformer_layer_cls_to_wrap"] == layer


# --- a Hub id reaches base_model and the summary -----------------------------------------------------


def test_base_model_defaults_to_the_hub_id(tmp_path: Path, hub_cache: Path) -> None:
    result = decide({**AXOLOTL_RUN, "model": "acme/pythia"}, tmp_path / "out")
    assert result.session.answers["model"] == "acme/pythia"
    axolotl = yaml.safe_load(file(result, "axolotl.yaml").text)
    assert axolotl["base_model"] == "acme/pythia" and "revision_of_model" not in axolotl
    said = model_assumption(result.session.answers, result.recommendation.facts)
    assert said.startswith(
        "Assumed: 11,846,072,320 parameters of acme/pythia, counted from its config.json in the Hugging Face cache,"
        " by architecture"
    ), said


def test_a_revision_reaches_axolotl(tmp_path: Path, hub_cache: Path) -> None:
    result = decide({**AXOLOTL_RUN, "model": "acme/pythia@v1"}, tmp_path / "out")
    axolotl = yaml.safe_load(file(result, "axolotl.yaml").text)
    assert (axolotl["base_model"], axolotl["revision_of_model"]) == ("acme/pythia", "v1")


def test_a_given_base_model_is_kept(tmp_path: Path, hub_cache: Path) -> None:
    result = decide({**AXOLOTL_RUN, "model": "acme/pythia", "base_model": "my/fine-tune"}, tmp_path / "out")
    assert yaml.safe_load(file(result, "axolotl.yaml").text)["base_model"] == "my/fine-tune"


def test_the_saved_answers_replay_the_hub_id(tmp_path: Path, hub_cache: Path) -> None:
    result = decide({**AXOLOTL_RUN, "model": "acme/pythia"}, tmp_path / "out", write=True)
    saved: dict[str, Any] = yaml.safe_load((tmp_path / "out" / "answers.yaml").read_text(encoding="utf-8"))
    answers = saved.get("answers", saved)
    assert answers["model"] == "acme/pythia"
    assert result.recommendation.facts.origin is not None
    assert result.recommendation.facts.origin.source == "hub-cache"


def test_a_local_folder_with_safetensors_says_so(tmp_path: Path) -> None:
    from test_checkpoint_count import TINY, TINY_COUNT, tiny_tensors, write_shard

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY), encoding="utf-8")
    write_shard(folder / "model.safetensors", tiny_tensors())
    result = decide({**AXOLOTL_RUN, "model": str(folder)}, tmp_path / "out")
    said = model_assumption(result.session.answers, result.recommendation.facts)
    assert said.startswith(f"Assumed: {TINY_COUNT:,} parameters of {folder}, counted from the safetensors headers")
    assert yaml.safe_load(file(result, "axolotl.yaml").text)["base_model"] == str(folder)


def test_an_unknown_id_offline_is_refused(tmp_path: Path, hub_cache: Path) -> None:
    with pytest.raises(InvalidAnswerError) as caught:
        decide({**AXOLOTL_RUN, "model": "acme/unknown"}, tmp_path / "out")
    # Refused as a model the wizard could not read (not as a value that is not allowed).
    assert isinstance(caught.value, ModelUnavailableError)
    assert (caught.value.key, caught.value.value) == ("model", "acme/unknown")
    assert not (tmp_path / "out").exists()
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_the_json_result_names_the_model_and_its_source(tmp_path: Path, hub_cache: Path) -> None:
    from wizard.report import result_envelope

    result = decide({**AXOLOTL_RUN, "model": "acme/pythia@v1"}, tmp_path / "out")
    model = result_envelope(result)["model"]
    assert model["name"] == "acme/pythia@v1" and model["hub_id"] == "acme/pythia"
    assert (model["source"], model["counted_from"], model["revision"]) == ("hub-cache", "config.json", "v1")
    sized = result_envelope(decide({**AXOLOTL_RUN, "model": "7B"}, tmp_path / "out2"))["model"]
    assert (sized["name"], sized["source"]) == ("7B", "size")


def test_the_prompt_takes_a_hub_id_and_says_why_it_refuses_one(hub_cache: Path) -> None:
    from helpers import tree
    from wizard.session import Sources, Step, collect

    refusals: list[str] = []

    class Prompter:
        def ask(self, step: Step) -> Any:
            if step.question.id == "model":
                try:
                    step.validate("acme/unknown")
                except InvalidAnswerError as exc:
                    refusals.append(exc.message)  # the prompt shows it and asks again
                return step.validate("acme/pythia")
            value = AXOLOTL_RUN.get(step.question.id, step.default)
            return None if value is None else step.validate(value)

        def review(self, tree: Any, session: Any) -> str | None:
            return None

    session = collect(tree(), Sources(prompter=Prompter()))  # type: ignore[arg-type]
    assert session.answers["model"] == "acme/pythia"
    assert session.inputs.model_origin is not None and session.inputs.model_origin.source == "hub-cache"
    assert refusals and refusals[0].startswith("model: 'acme/unknown' is not in the Hugging Face cache")


def test_set_model_takes_a_hub_id_and_names_set_when_it_refuses(
    tmp_path: Path, hub_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from wizard.cli import main

    example = str(REPO / "examples" / "a10g-7b-lora-axolotl.yaml")
    out = str(tmp_path / "out")
    argv = ["--answers", example, "--dry-run", "--output-dir", out, "--output", "json"]
    assert main([*argv, "--set", "model=acme/pythia@v1"]) == 0
    assert json.loads(capsys.readouterr().out)["answers"]["model"] == "acme/pythia@v1"
    assert main(["--answers", example, "--dry-run", "--output-dir", out, "--set", "model=acme/unknown"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --set: model: 'acme/unknown' is not in the Hugging Face cache"), err


@pytest.mark.parametrize(
    ("origin", "said"),
    [
        (
            ("acme/x", "hub", "safetensors headers"),
            "of acme/x, counted from the safetensors headers on the Hugging Face Hub",
        ),
        (
            ("acme/x", "hub", "config.json"),
            "of acme/x, counted from its config.json from the Hugging Face Hub, by architecture",
        ),
        (
            ("acme/x", "hub-cache", "safetensors headers"),
            "of acme/x, counted from the safetensors headers in the Hugging Face cache",
        ),
        (
            ("/m", "safetensors", "safetensors headers"),
            "of /m, counted from the safetensors headers of the local folder",
        ),
        (
            ("/m/config.json", "config", "config.json"),
            "counted from the model's config.json, by its architecture (llama)",
        ),
        (
            ("llama-3-8b", "catalog", "config.json"),
            "of llama-3-8b, counted from the bundled catalog's config.json values",
        ),
    ],
)
def test_each_source_is_said_in_words(origin: tuple[str, str, str], said: str) -> None:
    from wizard.engine.model_origin import ModelOrigin

    name, source, counted_from = origin
    assert ModelOrigin(name=name, source=source, counted_from=counted_from).counted("llama").startswith(said)


# Named catalog models against the published config.json they were copied from.
@pytest.mark.parametrize(
    ("name", "fixture"),
    [
        ("llama-3-8b", "meta-llama--Meta-Llama-3-8B"),
        ("llama-3.1-8b", "meta-llama--Meta-Llama-3-8B"),  # the same shape as Llama 3 8B
        ("mistral-7b", "mistralai--Mistral-7B-v0.1"),
        ("mixtral-8x7b", "mistralai--Mixtral-8x7B-v0.1"),
        ("qwen2.5-7b", "Qwen--Qwen2.5-7B"),
        ("qwen3-8b", "Qwen--Qwen3-8B"),
        ("qwen3-30b-a3b", "Qwen--Qwen3-30B-A3B"),
        ("gemma-7b", "google--gemma-7b"),
        ("gemma-2-9b", "google--gemma-2-9b"),
        ("phi-3-mini-4k", "microsoft--Phi-3-mini-4k-instruct"),
        ("pythia-12b", "EleutherAI--pythia-12b"),
        ("falcon-7b", "tiiuae--falcon-7b"),
        ("deepseek-v3", "deepseek-ai--DeepSeek-V3"),
    ],
)
def test_catalog_models_count_as_their_published_config(name: str, fixture: str) -> None:
    from wizard.engine.catalog import models_catalog
    from wizard.engine.param_count import count_config

    published = count_config(json.loads(config_text(fixture)))
    ours = count_config(models_catalog()["models"][name])
    assert (ours.total, ours.active, ours.layer_class) == (published.total, published.active, published.layer_class)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("gemma-2-9b-it", "gemma-2-9b"),
        ("Phi-3-mini-4k-instruct", "phi-3-mini-4k"),
        ("DeepSeek-V3", "deepseek-v3"),
    ],
)
def test_model_card_names_find_their_catalog_model(text: str, name: str) -> None:
    assert catalog_model(text) == name


def test_every_catalog_model_loads_its_hub_repository_said_as_the_base_weights(tmp_path: Path) -> None:
    """A model given by catalogue name, with no base_model, loads that name's repository (its base weights), and
    the line above says so and that a chat or instruct variant has an id of its own; a base_model given wins, and a
    size names no model: the placeholder stays, with no repository offered."""
    from wizard.engine.catalog import models_catalog

    catalog = models_catalog()
    named = set(catalog["models"])
    assert set(catalog["hub_ids"]) == named, named ^ set(catalog["hub_ids"])
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+", repo) for repo in catalog["hub_ids"].values())
    answers = {"target": "axolotl", "hardware": "nvidia", "gpu_model": "H100", "gpus_per_node": 8}
    for name in sorted(named):
        result = decide({**answers, "model": name, "method": "lora"}, tmp_path / name)
        if result.recommendation.refused:
            continue
        text = file(result, "axolotl.yaml").text
        assert yaml.safe_load(text)["base_model"] == catalog["hub_ids"][name]
        comment = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
        assert f"The base weights of {name} on the Hub; its chat or instruct variant has an id of its own" in comment
        assert "REPLACE-ME/base-model" not in text
    given = {**answers, "model": "llama-3.1-8b", "method": "lora", "base_model": "my-org/my-llama"}
    text = file(decide(given, tmp_path / "given"), "axolotl.yaml").text
    assert yaml.safe_load(text)["base_model"] == "my-org/my-llama" and "The base weights of" not in text
    # A size names no model: the placeholder stays, with no repository offered.
    text = file(decide({**answers, "model": "7B", "method": "lora"}, tmp_path / "size"), "axolotl.yaml").text
    assert yaml.safe_load(text)["base_model"] == "REPLACE-ME/base-model"
    assert "on the Hub;" not in text
