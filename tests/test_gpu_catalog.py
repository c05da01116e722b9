"""The GPU catalogue (wizard/data/gpus.yaml): memory as the driver reports it, sources, flags,
forgiving name matching, and what an unknown gpu_model does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import decide, write_yaml
from wizard.cli import main
from wizard.engine.catalog import MEMORY_FROM, GpuInfo, gpu_catalog, gpu_sources, lookup_gpu, name_words
from wizard.engine.memory import FIT_MARGIN, GIB
from wizard.errors import ExitCode, MissingAnswerError

CATALOG = gpu_catalog()
TOOL = {"nvidia": "nvidia-smi", "amd": "rocm-smi", "intel": "hl-smi"}
ARCHS = {"pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell"} | {
    "cdna",
    "cdna2",
    "cdna3",
    "gaudi2",
    "gaudi3",
}


@pytest.mark.parametrize("gpu", CATALOG, ids=lambda g: g.name)
def test_every_entry_has_reported_mib_a_source_and_flags(gpu: GpuInfo) -> None:
    assert isinstance(gpu.memory_mib, int) and 4096 <= gpu.memory_mib <= 512 * 1024
    # Either the vendor's own tool printed it, or it is marked as the nominal datasheet value.
    assert gpu.memory_from in MEMORY_FROM and gpu.memory_from in (TOOL[gpu.vendor], "datasheet")
    if gpu.memory_from == "datasheet":
        assert gpu.memory_mib % 1024 == 0, "a nominal capacity is a whole number of GiB"
    source = gpu_sources()[gpu.source]
    assert source.title and re.fullmatch(r"https://[^\s\"]+", source.url)
    assert all(isinstance(flag, bool) for flag in (gpu.bf16, gpu.flash_attention, gpu.fp8))
    assert gpu.arch in ARCHS
    assert gpu.patterns and all(p == p.lower().strip() and p for p in gpu.patterns)
    assert gpu.memory_gib == round(gpu.memory_mib / 1024, 2)


def test_patterns_are_unique_and_every_source_is_cited() -> None:
    patterns = [p for gpu in CATALOG for p in gpu.patterns]
    assert len(patterns) == len(set(patterns))
    cited = {gpu.source for gpu in CATALOG}
    # The tools' own documentation is cited for how memory is read, not by an entry.
    assert set(gpu_sources()) == cited | {"nvidia-smi", "rocm-smi", "hl-smi"}


def test_flags_follow_the_generation() -> None:
    for gpu in CATALOG:
        assert gpu.bf16 is (gpu.arch not in ("pascal", "volta", "turing")), gpu.name
        assert gpu.fp8 is (gpu.arch in ("ada", "hopper", "blackwell", "cdna3", "gaudi2", "gaudi3")), gpu.name
        if gpu.vendor == "nvidia":
            assert gpu.flash_attention is (gpu.arch not in ("pascal", "volta", "turing")), gpu.name


# The GPUs people fine-tune on, as a user or nvidia-smi / rocm-smi / hl-smi writes them, with the
# memory the driver reports (MiB) and what the card can do.
COVERED = [
    ("RTX 2080", 8192, "turing"),
    ("NVIDIA GeForce RTX 2080 Ti", 11264, "turing"),
    ("RTX 3060 12GB", 12288, "ampere"),
    ("NVIDIA GeForce RTX 3070", 8192, "ampere"),
    ("NVIDIA GeForce RTX 3080", 10240, "ampere"),
    ("RTX 3080 12GB", 12288, "ampere"),
    ("NVIDIA GeForce RTX 3090", 24576, "ampere"),
    ("NVIDIA GeForce RTX 3090 Ti", 24564, "ampere"),
    ("NVIDIA GeForce RTX 4060 Ti", 16380, "ada"),
    ("NVIDIA GeForce RTX 4070", 12282, "ada"),
    ("NVIDIA GeForce RTX 4070 Ti", 12282, "ada"),
    ("NVIDIA GeForce RTX 4080", 16376, "ada"),
    ("NVIDIA GeForce RTX 4090", 24564, "ada"),
    ("NVIDIA GeForce RTX 5080", 16303, "blackwell"),
    ("NVIDIA GeForce RTX 5090", 32607, "blackwell"),
    ("NVIDIA RTX A4000", 16376, "ampere"),
    ("NVIDIA RTX A5000", 24564, "ampere"),
    ("NVIDIA RTX A6000", 49140, "ampere"),
    ("NVIDIA RTX 6000 Ada Generation", 49140, "ada"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887, "blackwell"),
    ("Tesla T4", 15360, "turing"),
    ("NVIDIA L4", 23034, "ada"),
    ("NVIDIA L40", 46068, "ada"),
    ("NVIDIA L40S", 46068, "ada"),
    ("NVIDIA A10", 23028, "ampere"),
    ("NVIDIA A10G", 23028, "ampere"),
    ("Tesla V100-SXM2-16GB", 16160, "volta"),
    ("Tesla V100-SXM2-32GB", 32510, "volta"),
    ("NVIDIA A100-PCIE-40GB", 40960, "ampere"),
    ("NVIDIA A100-SXM4-40GB", 40960, "ampere"),
    ("NVIDIA A100 80GB PCIe", 81920, "ampere"),
    ("NVIDIA A100-SXM4-80GB", 81920, "ampere"),
    ("NVIDIA H100 PCIe", 81559, "hopper"),
    ("NVIDIA H100 80GB HBM3", 81559, "hopper"),
    ("NVIDIA H100 NVL", 95830, "hopper"),
    ("NVIDIA H200", 143771, "hopper"),
    ("NVIDIA B200", 183359, "blackwell"),
    ("AMD Instinct MI210", 65536, "cdna2"),
    ("AMD Instinct MI250", 65520, "cdna2"),
    ("AMD Instinct MI250X", 65520, "cdna2"),
    ("AMD Instinct MI300X", 206141652992 // 2**20, "cdna3"),
    ("AMD Instinct MI325X", 262144, "cdna3"),
    ("Gaudi 2", 98304, "gaudi2"),
    ("HL-325L", 131072, "gaudi3"),
]


@pytest.mark.parametrize(("name", "mib", "arch"), COVERED, ids=[c[0] for c in COVERED])
def test_the_gpus_people_fine_tune_on_are_known(name: str, mib: int, arch: str) -> None:
    gpu = lookup_gpu(name)
    assert gpu is not None, name
    assert (gpu.memory_mib, gpu.arch) == (mib, arch)


def test_no_bf16_on_t4_v100_and_rtx_20_and_fp8_from_ada_hopper_blackwell_and_mi300x() -> None:
    for name in ("T4", "V100", "V100 16GB", "RTX 2080", "RTX 2080 Ti"):
        assert lookup_gpu(name).bf16 is False, name  # type: ignore[union-attr]
    for name in ("L4", "RTX 4090", "H100", "H200", "B200", "RTX 5090", "MI300X", "MI325X"):
        assert lookup_gpu(name).fp8 is True, name  # type: ignore[union-attr]
    for name in ("A100", "A10G", "RTX 3090", "RTX A6000", "MI250X", "T4"):
        assert lookup_gpu(name).fp8 is False, name  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a10g", "NVIDIA A10G"),
        ("A10", "NVIDIA A10"),
        ("A100-SXM4-80GB", "NVIDIA A100 80GB SXM4"),  # the board named: NVLink
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 40GB PCIe"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"),
        ("a100 40g", "NVIDIA A100 40GB (PCIe, SXM4)"),
        ("A100", "NVIDIA A100 80GB (PCIe, SXM4)"),  # a bare A100 is the 80 GB card
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5"),  # nvidia-smi's name for the SXM5 board
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("H100", "NVIDIA H100 80GB (SXM5, PCIe)"),  # either board: the band spans both links
        ("h100 nvl", "NVIDIA H100 NVL (94 GB)"),
        ("RTX 4090", "GeForce RTX 4090"),
        ("rtx4090", "GeForce RTX 4090"),
        ("GeForce RTX 4070 Ti SUPER", "GeForce RTX 4070 Ti SUPER"),
        ("RTX 3060 Ti", "GeForce RTX 3060 Ti"),
        ("L40S", "NVIDIA L40S"),  # never the L4 or the L40
        ("Tesla V100S-PCIE-32GB", "Tesla V100 32GB / V100S"),
        ("NVIDIA GH200 480GB", "NVIDIA GH200 (96 GB HBM3)"),  # not the H200
        ("AMD INSTINCT MI250X / MI250", "AMD Instinct MI250X / MI250 (per GCD)"),
        ("gaudi3", "Intel Gaudi 3 (HL-325)"),
    ],
)
def test_names_are_matched_forgivingly(name: str, expected: str) -> None:
    gpu = lookup_gpu(name)
    assert gpu is not None and gpu.name == expected


@pytest.mark.parametrize(
    "name", ["Quadro RTX 6000", "NVIDIA GeForce RTX 4090 Laptop GPU", "RTX 4060", "Gaudi", "some new card", "", None]
)
def test_unknown_or_ambiguous_names_match_nothing(name: str | None) -> None:
    assert lookup_gpu(name) is None


def test_name_words_split_mixed_words() -> None:
    assert {"a100", "sxm4", "80gb", "80", "a", "100"} <= name_words("NVIDIA A100-SXM4-80GB")
    assert {"rtx", "4090"} <= name_words("RTX4090")


# --- the decision uses the reported capacity -----------------------------------------------------

A10G_LORA = {
    "target": "axolotl",
    "hardware": "nvidia",
    "gpu_model": "A10G",
    "gpus_per_node": 1,
    "model": "7B",
    "method": "lora",
}


def test_a10g_budget_is_80_percent_of_the_reported_22_49_gib(tmp_path: Path) -> None:
    result = decide(A10G_LORA, tmp_path)
    assert result.session.answers["gpu_memory_gb"] == 22.49
    assert result.session.origins["gpu_memory_gb"] == "default"
    budget = result.recommendation.facts.estimates["ddp"].budget
    assert budget == int(int(22.49 * GIB) * FIT_MARGIN)
    assert budget < int(24 * GIB * FIT_MARGIN) - GIB  # about 1.2 GiB less than the "24 GB" it is sold as
    assert "of 18.0 GiB usable" in result.recommendation.because


def test_a_given_memory_still_wins_over_the_catalogue(tmp_path: Path) -> None:
    result = decide({**A10G_LORA, "gpu_memory_gb": 24}, tmp_path)
    assert result.recommendation.facts.estimates["ddp"].budget == int(24 * GIB * FIT_MARGIN)


def test_gaudi_2_on_hpu_sets_the_memory(tmp_path: Path) -> None:
    answers = {"target": "accelerate", "hardware": "hpu", "gpu_model": "Gaudi 2", "gpus_per_node": 8}
    result = decide({**answers, "model": "8B", "method": "lora"}, tmp_path)
    assert result.session.answers["gpu_memory_gb"] == 96
    assert result.recommendation.backend == "multi_hpu"


# --- an unknown gpu_model: the memory must be given ----------------------------------------------


def test_an_unknown_gpu_model_without_memory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MissingAnswerError) as info:
        decide({**A10G_LORA, "gpu_model": "Quadro Z9"}, tmp_path)
    assert info.value.key == "gpu_memory_gb" and info.value.exit_code == ExitCode.BAD_INPUT
    # The message names the unknown model and the answer that replaces the catalogue's size.
    assert "'Quadro Z9'" in info.value.message and "gpu_memory_gb" in info.value.message
    assert info.value.hint is not None and "--defaults" not in info.value.hint


def test_estimate_names_its_own_options_for_a_missing_answer(capsys: pytest.CaptureFixture[str]) -> None:
    # The main command's hint (answers file, --set, --defaults) would send the user elsewhere.
    code = main(["estimate", "--model", "8B", "--gpus-per-node", "1", "--method", "lora", "--gpu-model", "Quadro Z9"])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT and "gpu_model 'Quadro Z9' is not a GPU model the wizard knows" in err
    assert "(hint: pass --gpu-memory-gb GIB or a known --gpu-model NAME (A100, H100, L4, ...))" in " ".join(err.split())


def test_an_unknown_gpu_model_with_defaults_exits_2_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_yaml(tmp_path / "answers.yaml", {**A10G_LORA, "gpu_model": "Quadro Z9"})
    code = main(["--answers", str(path), "--defaults", "--dry-run", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == ExitCode.BAD_INPUT == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: gpu_memory_gb: ") and "Traceback" not in err
    for fragment in ("gpu_model", "'Quadro Z9'", "gpu_memory_gb must be given"):
        assert fragment in lines[0]
    assert not (tmp_path / "out").exists()


def test_an_unknown_gpu_model_with_memory_works(tmp_path: Path) -> None:
    result = decide({**A10G_LORA, "gpu_model": "Quadro Z9", "gpu_memory_gb": 45}, tmp_path)
    assert result.recommendation.backend == "single_gpu"
    assert result.recommendation.facts.estimates["ddp"].budget == int(45 * GIB * FIT_MARGIN)


@pytest.mark.parametrize("gpu", gpu_catalog(), ids=lambda g: g.name)
def test_a_name_with_the_cards_own_size_matches_and_a_wrong_size_does_not(gpu: GpuInfo) -> None:
    """Invariant over the catalogue: every pattern followed by the card's own size in GB (as names write it)
    finds the card, and the same pattern with a smaller size than the card has (a tenth of it, as "A100 8GB"
    misses a digit) finds nothing rather than the card, so the memory is asked for instead of planning for
    memory the GPU does not have."""
    own = round(gpu.memory_mib / 1024)
    for pattern in gpu.patterns:
        assert lookup_gpu(f"{pattern} {own}GB") == gpu, (pattern, own)
        assert lookup_gpu(f"{pattern} {max(own // 10, 1)}GB") is None, pattern


def test_an_a100_8gb_is_not_taken_for_the_80gb_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = write_yaml(
        tmp_path / "a.yaml",
        {
            "target": "accelerate",
            "hardware": "nvidia",
            "gpu_model": "A100 8GB",
            "gpus_per_node": 1,
            "model": "1B",
            "method": "lora",
        },
    )
    code = main(["--answers", str(answers), "--dry-run", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == ExitCode.BAD_INPUT
    assert "gpu_model 'A100 8GB'" in err and "names a memory size that model does not come in" in err, err


def test_a_rate_without_a_datasheet_is_said_so_beside_it_in_the_step_assumptions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every card whose tflops carries a tflops_note: explain's step-time assumptions print the note beside
    the rate, end to end; a card without one prints the rate alone."""
    noted = 0
    for gpu in gpu_catalog():
        if gpu.tflops is None or gpu.vendor != "nvidia" or not gpu.bf16:
            continue
        answers = write_yaml(
            tmp_path / "a.yaml",
            {
                "target": "accelerate",
                "hardware": "nvidia",
                "gpu_model": gpu.patterns[0],
                "gpus_per_node": 1,
                "model": "1B",
                "method": "lora",
            },
        )
        assert main(["explain", "--answers", str(answers)]) == 0
        text = " ".join(capsys.readouterr().out.split())
        rate = f"{gpu.tflops:g} TFLOPS (peak dense 16-bit"
        assert rate in text, (gpu.name, text[-1500:])
        after = text.split(rate, 1)[1]
        if gpu.tflops_note:
            assert after.startswith("; " + " ".join(gpu.tflops_note.split()) + ")"), (gpu.name, after[:300])
            noted += 1
        else:
            assert after.startswith(")"), (gpu.name, after[:100])
    assert noted, "no card's rate is marked as resting on no datasheet"
