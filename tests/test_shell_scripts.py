"""Every shell script the wizard writes, on every path of the tree, parses, lints and runs as meant.

* `bash -n` and shellcheck (every level) accept every distinct launch.sh and slurm.sbatch, with and
  without a `main_process_ip` answer;
* run with stand-ins for the tools (tests/shell_tools.py), each script gives the tool exactly the
  arguments its config calls for (config file, DeepSpeed JSON, machine rank, rendezvous address,
  machine and GPU counts), and a missing or wrong rank or address stops it with exit 2 and a
  message naming the variable, before any tool starts;
* an address with quotes, spaces, `$(...)` or backquotes is refused as an answer, and even when
  it reaches a template it stays one inert shell word, given verbatim to the tool.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from shell_tools import Call, lint, run_script

from helpers import decide, decided_paths, file, parsed, tree
from test_scenarios import ANSWERS
from wizard.app import Result
from wizard.errors import InvalidAnswerError, WizardError
from wizard.render.context import plan_render
from wizard.render.renderer import RenderedFile, render_plan

ANSWERED_IP = "head-0.cluster"
ENV_IP = "10.9.8.7"
SCRIPT_ARGS = ["train.py", "--lr", "1e-5", "two words"]
# A machine rank launch.sh must refuse (with the number of machines added per script).
BAD_RANKS = ["", "-1", "01", "x", "1 1", "0x1", "$(touch PWNED)", "9999999999"]
HOSTILE = [
    "h1'; touch PWNED; echo '",
    'h1" "touch PWNED',
    "$(touch PWNED)",
    "`touch PWNED`",
    "host name with spaces",
    "h1\\$HOME*",
    "-n",
]


def shell_files(result: Result) -> list[RenderedFile]:
    return [f for f in result.files if f.executable or f.name.endswith((".sh", ".sbatch"))]


def variants(answers: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The path as enumerated, and with the rendezvous address answered where it is asked."""
    yield answers
    if int(answers.get("num_nodes", 1)) > 1 and not answers.get("use_ray"):
        yield {**answers, "main_process_ip": ANSWERED_IP}


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory) -> list[Result]:
    """Every path of the tree that reaches a recommendation (the shared dry-run walk), and each
    multi-machine path once more with the rendezvous address answered."""
    folder = tmp_path_factory.mktemp("shell_paths")
    results = []
    for answers, result in decided_paths(folder):
        results.append(result)
        for variant in list(variants(answers))[1:]:
            try:
                again = decide(variant, folder / "out")
            except WizardError:
                continue
            if not again.recommendation.refused:
                results.append(again)
    return results


def write_out(files: list[RenderedFile], out: Path) -> Path:
    out.mkdir(parents=True)
    for rendered in files:
        path = out / rendered.name
        path.write_text(rendered.text, encoding="utf-8")
        path.chmod(0o755 if rendered.executable else 0o644)
    return out


def test_every_generated_shell_script_parses_and_passes_shellcheck(decided: list[Result], tmp_path: Path) -> None:
    texts: dict[str, str] = {}
    for result in decided:
        for rendered in shell_files(result):
            assert rendered.executable and rendered.text.startswith("#!/usr/bin/env bash\n"), rendered.name
            texts.setdefault(rendered.text, rendered.name)
    assert {"launch.sh", "slurm.sbatch"} <= set(texts.values()) and len(texts) > 500
    # Both forms of the address check are among them.
    assert any(f"MAIN_PROCESS_IP={ANSWERED_IP}" in text for text in texts)
    assert any('if [ -z "${MAIN_PROCESS_IP:-}" ]; then\n  echo' in text for text in texts)
    scripts = []
    for index, (text, name) in enumerate(texts.items()):
        path = tmp_path / f"{index}-{name}"
        path.write_text(text, encoding="utf-8")
        scripts.append(path)
    assert lint(scripts) == []


def test_the_checks_catch_a_broken_script(tmp_path: Path) -> None:
    """The linting itself can fail: the old `${VAR:?message}` form with an apostrophe is caught."""
    script = tmp_path / "launch.sh"
    script.write_text('#!/usr/bin/env bash\n: "${NODE_RANK:?set NODE_RANK to this machine\'s rank}"\necho $1\n')
    problems = lint([script])
    assert any(p.startswith("bash -n") for p in problems) and any("SC10" in p for p in problems), problems
    script.write_text("#!/usr/bin/env bash\necho $1\n")
    assert any("SC2086" in p for p in lint([script]))


# ---------------------------------------------------------------------------------------------
# Running launch.sh with stand-ins for the tools
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """What launch.sh must do, read from the config files beside it (not from the script)."""

    target: str
    machines: int
    answered_ip: str | None
    port: int | None
    deepspeed_file: str | None  # the DeepSpeed JSON the config names (relative to the folder)
    xla: bool = False
    hostfile_processes: int | None = None  # MULTI_CPU: the mpirun hostfile launch.sh writes
    use_ray: bool = False
    gpus_per_machine: int = 1
    # Accelerate with a brought DeepSpeed JSON: the precision its "auto" switches take, a flag.
    mixed_precision: str | None = None


def expectation(result: Result) -> Launch:
    answers = result.session.answers
    settings = result.recommendation.settings
    machines = int(settings["num_machines"])
    if answers["target"] == "accelerate":
        cfg = parsed(result, "accelerate_config.yaml")
        assert cfg["num_machines"] == machines
        return Launch(
            "accelerate",
            machines,
            answers.get("main_process_ip"),
            cfg.get("main_process_port"),
            (cfg.get("deepspeed_config") or {}).get("deepspeed_config_file"),
            xla=cfg["distributed_type"] == "XLA",
            hostfile_processes=cfg["num_processes"] if cfg["distributed_type"] == "MULTI_CPU" else None,
            mixed_precision=settings["mixed_precision"] if "deepspeed_config" in answers else None,
        )
    cfg = parsed(result, "axolotl.yaml")
    processes = int(settings["num_processes"])
    assert processes % machines == 0
    return Launch(
        "axolotl",
        machines,
        answers.get("main_process_ip"),
        answers.get("main_process_port"),
        cfg.get("deepspeed"),
        use_ray=bool(cfg.get("use_ray")),
        gpus_per_machine=processes // machines,
    )


def accelerate_call(expect: Launch, out: Path, rank: str | None = None, ip: str | None = None) -> Call:
    argv = ["launch", "--config_file", str(out / "accelerate_config.yaml")]
    if expect.xla:
        argv.append("--tpu")
    if expect.deepspeed_file:
        argv += ["--deepspeed_config_file", str(out / expect.deepspeed_file)]
    if expect.mixed_precision:
        argv += ["--mixed_precision", expect.mixed_precision]
    if expect.machines > 1:
        argv += ["--machine_rank", str(rank), "--main_process_ip", str(ip)]
    cwd = out if expect.hostfile_processes else out.parent / "elsewhere"  # MULTI_CPU runs from its folder
    return Call("accelerate", [*argv, *SCRIPT_ARGS], str(cwd))


def axolotl_calls(
    expect: Launch, out: Path, rank: str | None = None, ip: str | None = None, preprocess: bool = True
) -> list[Call]:
    calls = [Call("ray", ["status"], str(out))] if expect.use_ray else []
    if preprocess:
        calls.append(Call("axolotl", ["preprocess", "axolotl.yaml"], str(out)))
    train = ["train", "axolotl.yaml"]
    if expect.use_ray:
        train.append("--use-ray")
    elif expect.machines > 1:
        train += ["--launcher", "torchrun", "--", "--nnodes", str(expect.machines)]
        train += ["--nproc_per_node", str(expect.gpus_per_machine), "--node_rank", str(rank)]
        train += ["--rdzv_id", "backend-wizard", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"{ip}:{expect.port}"]
    elif expect.gpus_per_machine > 1:  # the process count explicit, not whatever GPUs accelerate launch sees
        train += ["--launcher", "accelerate", "--", "--num_processes", str(expect.gpus_per_machine)]
    return [*calls, Call("axolotl", train, str(out))]


def body(text: str) -> str:
    """The commands of a script, without its comments."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def distinct_launches(results: list[Result]) -> dict[tuple[str, Launch], Result]:
    """One path per distinct (launch.sh commands, expected behaviour)."""
    chosen: dict[tuple[str, Launch], Result] = {}
    for result in results:
        chosen.setdefault((body(file(result, "launch.sh").text), expectation(result)), result)
    return chosen


def check_launch(result: Result, expect: Launch, tmp_path: Path) -> None:
    """Run one launch.sh in every way a user or SLURM can, with the stand-ins; check each call."""
    out = write_out(result.files, tmp_path / "out")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = out / "launch.sh"
    rank_var = "MACHINE_RANK" if expect.target == "accelerate" else "NODE_RANK"
    args = SCRIPT_ARGS if expect.target == "accelerate" else []
    if expect.deepspeed_file:
        assert not Path(expect.deepspeed_file).is_absolute() and (out / expect.deepspeed_file).is_file()

    def run(env: dict[str, str], *, skip: bool = False) -> tuple[int, str, list[Call]]:
        extra = {"SKIP_PREPROCESS": "1"} if skip else {}
        proc, calls = run_script(script, tmp_path, *args, env=env | extra, cwd=elsewhere)
        return proc.returncode, proc.stderr, calls

    def expected(rank: str | None = None, ip: str | None = None, preprocess: bool = True) -> list[Call]:
        if expect.target == "accelerate":
            return [accelerate_call(expect, out, rank, ip)]
        return axolotl_calls(expect, out, rank, ip, preprocess)

    if expect.machines == 1 or expect.use_ray:
        code, err, calls = run({})
        assert (code, calls) == (0, expected()), err
        if expect.target == "axolotl" and not expect.use_ray:
            assert run({}, skip=True)[2] == expected(preprocess=False)
    else:
        last = str(expect.machines - 1)
        code, err, calls = run({rank_var: last})
        if expect.answered_ip:  # the answer is the fallback address
            assert (code, calls) == (0, expected(last, expect.answered_ip)), err
        else:
            assert (code, calls) == (2, []) and "set MAIN_PROCESS_IP to" in err, err
        code, err, calls = run({rank_var: "0", "MAIN_PROCESS_IP": ENV_IP})  # the variable wins
        assert (code, calls) == (0, expected("0", ENV_IP)), err
        code, err, calls = run({"MAIN_PROCESS_IP": ENV_IP})
        assert (code, calls) == (2, []) and f"set {rank_var} to this machine's rank" in err, err
        for bad in [*BAD_RANKS, str(expect.machines)]:
            code, err, calls = run({rank_var: bad, "MAIN_PROCESS_IP": ENV_IP})
            assert (code, calls) == (2, []), (bad, err)
            assert rank_var in err and f"0 to {last}" in err, (bad, err)
        assert not list(tmp_path.rglob("PWNED"))
    if expect.target == "accelerate":
        code, err, calls = run({"MACHINE_RANK": "0", "MAIN_PROCESS_IP": ENV_IP} if expect.machines > 1 else {})
        assert code == 0 and all(Path(a).is_file() for a in calls[0].argv if a.startswith("/")), calls
        if expect.hostfile_processes:
            assert (out / "hostfile").read_text() == f"localhost:{expect.hostfile_processes}\n"
        proc, calls = run_script(script, tmp_path, cwd=elsewhere)  # no training script
        assert (proc.returncode, calls) == (2, []) and "usage:" in proc.stderr


def test_every_launch_script_gives_the_tools_exactly_their_arguments(decided: list[Result], tmp_path: Path) -> None:
    launches = distinct_launches(decided)
    kinds = {(e.target, e.machines > 1, e.use_ray, bool(e.answered_ip), bool(e.deepspeed_file)) for _, e in launches}
    assert len(launches) > 40 and len(kinds) >= 10, kinds
    for index, ((_, expect), result) in enumerate(launches.items()):
        check_launch(result, expect, tmp_path / str(index))


def test_axolotl_launcher_arguments_parse_with_the_launchers_own_parsers(decided: list[Result]) -> None:
    """What launch.sh passes after `--` reaches accelerate launch or torchrun: their own parsers take it.

    `axolotl train CFG --launcher L -- ARGS` runs `L ARGS -m axolotl.cli.train CFG` (Axolotl's
    cli/utils/train.py), so ARGS must parse there and give the planned processes per machine.
    """
    pytest.importorskip("accelerate")
    from accelerate.commands.launch import launch_command_parser
    from torch.distributed.run import get_args_parser

    seen = set()
    for _, expect in distinct_launches(decided):
        if expect.target != "axolotl" or expect.use_ray:
            continue
        train = axolotl_calls(expect, Path("/out"), "0", "10.0.0.1")[-1].argv
        if "--" not in train:
            assert expect.gpus_per_machine == 1 and expect.machines == 1, train
            seen.add("one process")
            continue
        launcher, extra = train[train.index("--launcher") + 1], train[train.index("--") + 1 :]
        line = [*extra, "-m", "axolotl.cli.train", "axolotl.yaml"]
        if launcher == "accelerate":
            args = launch_command_parser().parse_args(line)
            assert args.num_processes == expect.gpus_per_machine and args.module, line
        else:
            args = get_args_parser().parse_args(line)
            assert int(args.nproc_per_node) == expect.gpus_per_machine, line
            assert args.nnodes == str(expect.machines), line
        seen.add(launcher)
    assert seen == {"one process", "accelerate", "torchrun"}, seen


# ---------------------------------------------------------------------------------------------
# slurm.sbatch: one launch.sh per machine, with SLURM's rank and first host
# ---------------------------------------------------------------------------------------------

HOSTS = ["node-a", "node-b", "node-c", "node-d", "node-e", "node-f", "node-g", "node-h"]


def test_every_slurm_script_starts_each_machine_with_its_rank(decided: list[Result], tmp_path: Path) -> None:
    jobs: dict[tuple[str, str, Launch], Result] = {}
    for result in decided:
        names = {f.name for f in result.files}
        if "slurm.sbatch" in names:
            key = (body(file(result, "slurm.sbatch").text), body(file(result, "launch.sh").text), expectation(result))
            jobs.setdefault(key, result)
    assert len(jobs) > 10
    for index, ((_, _, expect), result) in enumerate(jobs.items()):
        folder = tmp_path / str(index)
        out = write_out(result.files, folder / "out")
        hosts = HOSTS[: expect.machines]
        env = {
            "SLURM_SUBMIT_DIR": str(out),
            "SLURM_JOB_NODELIST": "node-[a-h]",
            "NODES": str(expect.machines),
            "STDOUT_SCONTROL": "\n".join(hosts) + "\n",
        }
        args = SCRIPT_ARGS if expect.target == "accelerate" else []
        proc, calls = run_script(out / "slurm.sbatch", folder, *args, env=env)
        assert proc.returncode == 0, proc.stderr
        assert calls[0] == Call("scontrol", ["show", "hostnames", "node-[a-h]"], str(out))
        if expect.target == "accelerate":
            # accelerate_call's cwd is the caller's folder; srun starts launch.sh from the submit folder.
            wanted = [accelerate_call(expect, out, str(rank), hosts[0]) for rank in range(expect.machines)]
            wanted = [Call(c.tool, c.argv, str(out)) for c in wanted]
        else:
            wanted = [Call("axolotl", ["preprocess", "axolotl.yaml"], str(out))]  # once, before the machines
            for rank in range(expect.machines):
                wanted += axolotl_calls(expect, out, str(rank), hosts[0], preprocess=False)
        assert calls[1:] == wanted
    # Outside SLURM, or with an empty host list, the job stops before anything starts.
    for missing in ("SLURM_SUBMIT_DIR", "SLURM_JOB_NODELIST"):
        proc, calls = run_script(out / "slurm.sbatch", folder, env={k: v for k, v in env.items() if k != missing})
        assert (proc.returncode, calls) == (2, []) and "submit this script with sbatch" in proc.stderr
    proc, calls = run_script(out / "slurm.sbatch", folder, env={**env, "STDOUT_SCONTROL": ""})
    assert proc.returncode == 2 and [c.tool for c in calls] == ["scontrol"] and "no machine" in proc.stderr


# ---------------------------------------------------------------------------------------------
# Hostile addresses
# ---------------------------------------------------------------------------------------------

MULTI_NODE = {"accelerate": ANSWERS[24], "axolotl": ANSWERS[25]}


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_address_is_refused_as_an_answer(tmp_path: Path, hostile: str) -> None:
    for answers in MULTI_NODE.values():
        with pytest.raises(InvalidAnswerError) as info:
            decide({**answers, "main_process_ip": hostile}, tmp_path)
        assert info.value.key == "main_process_ip"


@pytest.mark.parametrize("target", sorted(MULTI_NODE))
@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_hostile_address_in_the_templates_stays_one_inert_word(tmp_path: Path, target: str, hostile: str) -> None:
    """Past the answer's validation (a new question, a caller of the render API) quoting still holds."""
    result = decide(MULTI_NODE[target], tmp_path / "decided")
    answers = {**result.session.answers, "main_process_ip": hostile}
    plan = plan_render(tree(), result.recommendation, answers, None)
    files = render_plan(plan)
    out = write_out(files, tmp_path / "out")
    # (From warnings up: shellcheck notes, rightly, that a quoted "$(...)" is not expanded.)
    assert lint([out / "launch.sh", out / "slurm.sbatch"], severity="warning") == []
    expect = expectation(result)
    rank_var = "MACHINE_RANK" if target == "accelerate" else "NODE_RANK"
    args = SCRIPT_ARGS if target == "accelerate" else []
    for env_ip in (None, hostile):  # the answered fallback, then the same text given in the variable
        env = {rank_var: "1"} | ({"MAIN_PROCESS_IP": env_ip} if env_ip else {})
        proc, calls = run_script(out / "launch.sh", tmp_path, *args, env=env, cwd=out)
        assert proc.returncode == 0, proc.stderr
        if target == "accelerate":
            assert calls == [Call("accelerate", accelerate_call(expect, out, "1", hostile).argv, str(out))]
        else:
            assert calls == axolotl_calls(expect, out, "1", hostile)
    assert not list(tmp_path.rglob("PWNED")), "a command inside the address ran"
    for config in ("accelerate_config.yaml", "axolotl.yaml"):
        if (out / config).exists():  # the YAML keeps it as one string value too
            data = yaml.safe_load((out / config).read_text())
            assert data.get("main_process_ip", hostile) == hostile
