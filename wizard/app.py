"""The wizard as one call: answers in, recommendation and rendered files out.

No printing and no prompting here: the CLI supplies the prompter and prints the result.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from wizard import disk_cache
from wizard.checks import check_config
from wizard.config_files import make_json_loader
from wizard.engine.batch import GLOBAL_BATCH
from wizard.engine.batch_choice import check_plan, settle_batch
from wizard.engine.deepspeed_json import reconcile
from wizard.engine.evaluate import Recommendation, chosen_estimate, not_asked_because, recommend
from wizard.engine.memory import OFFLOAD_STRATEGIES
from wizard.engine.strict_json import loads_strict
from wizard.engine.tree import Tree, check_engine_questions, load_tree
from wizard.errors import DeepSpeedConfigError, SelfCheckError
from wizard.inputs import ANSWERS_SCHEMA_VERSION, read_tree_text
from wizard.render.context import ACCELERATE_CONFIG, ANSWERS_FILE, AXOLOTL_CONFIG, DEEPSPEED_CONFIG, plan_render
from wizard.render.existing import FILE, look
from wizard.render.manifest import with_manifest
from wizard.render.renderer import RenderedFile, json_document, render_plan
from wizard.render.writer import CONFLICT, FileAction, check_output_dir, plan_writes, write_files
from wizard.resources import default_tree_path
from wizard.session import Session, Sources, collect, settle_given

TYPE_CHECKING = False
if TYPE_CHECKING:
    from wizard.engine.what_if import WhatIf

CHECKED_FORMATS = {ACCELERATE_CONFIG: "accelerate", AXOLOTL_CONFIG: "axolotl", DEEPSPEED_CONFIG: "deepspeed"}


@dataclass
class Result:
    """Everything one run produced."""

    session: Session
    recommendation: Recommendation
    files: list[RenderedFile] = field(default_factory=list)
    actions: list[FileAction] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # What would change the answer, for a decision that offloads or refuses (the summary shows
    # the levers there, where a lighter method or more GPUs may beat a slow offload). Worked out
    # when first read: each lever decides the tree again, and `--output json` never shows them.
    find_levers: Callable[[], list[WhatIf]] | None = field(default=None, repr=False, compare=False)
    # The levers are the ways out of a close call kept without offload (each with room at its peak),
    # not changes of the answer: the summary heads them so.
    levers_give_room: bool = False
    _levers: list[WhatIf] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def levers(self) -> list[WhatIf]:
        """The levers (empty where the decision neither offloads nor refuses)."""
        if self._levers is None:
            self._levers = self.find_levers() if self.find_levers is not None else []
        return self._levers

    @property
    def conflicts(self) -> list[FileAction]:
        """Existing files with other content that --force would replace (nothing is written then)."""
        return [a for a in self.actions if a.action == CONFLICT]


# Layouts that shard the training state without offloading it.
SHARDED_STRATEGIES = ("fsdp2", "hsdp", "zero1", "zero2", "zero3")

# Trees already parsed in this process, by (file, text), with whether they were linted: parsing
# and linting take a third of a second, and an interactive run or a program calling `main` more
# than once (the review screen, the tests) would pay it again for the same text. A Tree is
# immutable, so one object can serve every caller; a changed file has another text and is parsed
# anew.
_LOADED: dict[tuple[str, str], tuple[Tree, bool]] = {}


def load(tree_path: Path | None = None, *, lint: bool | None = None) -> Tree:
    """Load the decision tree (the shipped one by default), linted unless it is the shipped one.

    A tree from ``--tree`` is the user's and is linted in full. The shipped one is not linted on
    every run (``lint=None``): the tests and ``backend-wizard tree --lint`` lint it, and it does
    not change between them and a run. ``lint=True`` lints whichever tree it is.
    """
    path = tree_path or default_tree_path()
    wanted = tree_path is not None if lint is None else lint
    key = (str(path), read_tree_text(path))
    cached = _LOADED.get(key)
    if cached is None or (wanted and not cached[1]):
        if len(_LOADED) >= 8:  # a few trees at most; a test that mutates the tree makes many
            _LOADED.clear()
        # A parsed copy from an earlier run when there is one (wizard.disk_cache): parsing the
        # tree is a large part of a run. A tree that fails its lint raises and is never stored.
        # The path is in the key: the parsed texts name it in their error messages.
        path_text, text = key
        kind = f"tree {path_text!r} lint={wanted}"
        parsed = disk_cache.parsed(kind, text, lambda: load_tree(text, path_text, lint=wanted))
        _LOADED[key] = (parsed, wanted)
    return _LOADED[key][0]


def load_runnable(tree_path: Path | None = None) -> Tree:
    """`load`, for a run that decides: the tree must ask what the estimate and the files read by name.

    (`tree --lint` loads with `load`: a tree the language accepts may still be one the wizard cannot run.)
    """
    tree = load(tree_path)
    check_engine_questions(tree)
    return tree


# libyaml's safe dumper where PyYAML was built with it (several times faster, and every run writes its
# answers file; it may fold a long string at another place, but it reads back the same); PyYAML's own otherwise.
_SAFE_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

REPLAY_HEADER = "# Answers used by backend-wizard. Replay: backend-wizard --answers answers.yaml"


def answers_document(tree: Tree, answers: dict[str, Any], header: str = REPLAY_HEADER) -> str:
    """The answers actually used, in question order, as a replayable YAML file.

    ``header`` is a comment line of the wizard's own words (never user text: a newline in it
    would end the comment and turn the rest into YAML).
    """
    ordered = {qid: answers[qid] for qid in tree.question_ids if qid in answers}
    document = {"schema_version": ANSWERS_SCHEMA_VERSION, "answers": ordered}
    try:
        body = yaml.dump(document, Dumper=_SAFE_DUMPER, sort_keys=False, allow_unicode=True)
    except (UnicodeError, yaml.YAMLError):  # libyaml takes no lone surrogate (a JSON escape); PyYAML escapes it
        body = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    assert header.startswith("# ") and "\n" not in header and "\r" not in header
    return header + "\n" + body


def _whole_copy(tree: Tree, backend: str | None) -> bool:
    """Whether `backend` (None for a refusal) keeps a full copy of the weights on every device."""
    return backend is not None and backend in tree.backends and tree.backends[backend].traits.whole_copy


def _room_levers_only(rec: Recommendation, offloads: bool, answers: Mapping[str, Any]) -> bool:
    """Whether the run is a close call kept without offload (nor a brought JSON): its levers are its ways out."""
    chosen = chosen_estimate(rec)
    return (
        not rec.refused
        and not offloads
        and "deepspeed_config" not in answers
        and chosen is not None
        and chosen.close_call
    )


def _lever_finder(
    tree: Tree, session: Session, rec: Recommendation, offloads: bool
) -> Callable[[], list[WhatIf]] | None:
    """How to work out the run's levers later, from the answers as they are now; None: it has none."""
    # A micro-batch kept at its prompt stays in every lever, as it does in the run (like for like).
    answers, inputs, given = dict(session.answers), session.inputs, settle_given(session)
    aside = dict(session.set_aside)

    def levers() -> list[WhatIf]:
        from wizard.engine.what_if import what_if  # only a run that shows its levers decides them

        return what_if(tree, answers, inputs, rec, given, aside)

    if rec.refused or offloads or "deepspeed_config" in answers:
        # A brought JSON decides before any memory rule: what the wizard would pick without it
        # (keep it or switch) and what makes it fit are worth seeing whatever it runs.
        return levers
    if _room_levers_only(rec, offloads, answers):
        # A close call is shown its ways out: the levers that leave a run with room at its peak.
        def room_levers() -> list[WhatIf]:
            return [lever for lever in levers() if lever.backend is not None and not lever.close_call]

        return room_levers
    if rec.settings.get("strategy") in SHARDED_STRATEGIES:
        # A sharded run is shown what would let a full copy fit on each GPU (QLoRA instead of
        # LoRA, say): plain DDP has no gathering and no sharding to configure.
        def whole_copy_levers() -> list[WhatIf]:
            return [lever for lever in levers() if _whole_copy(tree, lever.backend)]

        return whole_copy_levers
    return None


def self_check(
    files: list[RenderedFile],
    world_size: int,
    user_json: str | None = None,
    *,
    launch_mixed_precision: str | None = None,
) -> list[str]:
    """Run `check` on every config about to be written; refuse (exit 6) if any has an error.

    ``user_json`` is the path of the DeepSpeed JSON the user brought: its copy, ds_config.json, is
    checked like every written file, and what is found inside it is reported against that path
    (an error there is the user's input, exit 2, not the wizard's output).
    ``launch_mixed_precision`` is the ``--mixed_precision`` launch.sh passes, if any.
    Returns the warnings, which are shown but do not block (an offloading user JSON, say).
    """
    rendered = {f.name: f.text for f in files}
    parsed = {f.name: _data(f) for f in files if f.name in CHECKED_FORMATS}

    def load_json(name: str) -> object:
        if name in rendered:
            return json.loads(rendered[name])
        return make_json_loader(Path(name))(name)

    warnings: list[str] = []
    launch = rendered.get("launch.sh", "")
    supplied_by_launch = {"acc-multinode-no-ip"} if "--main_process_ip" in launch else set()
    for name, fmt in CHECKED_FORMATS.items():
        if name not in rendered:
            continue
        data = parsed[name]
        findings = check_config(
            data, fmt, world_size=world_size, load_json=load_json, launch_mixed_precision=launch_mixed_precision
        )
        for finding in findings:
            where = f"{name}: {finding.path}" if finding.path else name
            inside = _inside_copy(name, finding.path) if user_json else None
            if inside is not None:
                where = f"{user_json}: {inside}" if inside else str(user_json)
            if finding.severity == "error" and inside is not None:
                # A problem inside the user's own DeepSpeed JSON: their input, not our output.
                raise DeepSpeedConfigError(f"{where}: {finding.message}", hint=finding.fix)
            if finding.severity == "error":
                raise SelfCheckError(
                    f"refusing to write {where}: {finding.message} (nothing was written)",
                    hint=f"{finding.fix} [{finding.check}]",
                )
            if finding.check in supplied_by_launch:
                continue  # launch.sh passes it on the command line, which the file alone cannot know
            if finding.severity == "warning":
                warnings.append(f"{where}: {finding.message}")
    # The copy is checked on its own and through the YAML that references it: one line each.
    return list(dict.fromkeys(warnings))


def _data(file: RenderedFile) -> Any:
    """A config's data: as the renderer's parse-back guard parsed it, else parsed here."""
    if file.data is not None:
        return file.data
    return json.loads(file.text) if file.name.endswith(".json") else yaml.safe_load(file.text)


def _inside_copy(name: str, path: str) -> str | None:
    """The path inside ds_config.json of a finding in it ("" for the file itself), else None."""
    if name == DEEPSPEED_CONFIG:
        return path
    prefix = f"{DEEPSPEED_CONFIG}:"
    return path.removeprefix(prefix) if path.startswith(prefix) else None


def copied_json(output_dir: Path, files: list[RenderedFile]) -> list[RenderedFile]:
    """Keep an existing ds_config.json whose content already is the brought JSON's, as it is.

    Rebuilding a folder from its own (hand-edited) ds_config.json then leaves that file alone
    instead of reformatting it, which would otherwise need --force. The file is read as strictly
    as the brought JSON was (duplicate keys refused), so only a difference in layout is kept.
    """
    kept = []
    for file in files:
        if file.name == DEEPSPEED_CONFIG:
            # Read as the writer reads old files: no link followed, no pipe waited on, bounded.
            with contextlib.suppress(OSError):
                found = look(output_dir / DEEPSPEED_CONFIG)
                current = found.text if found.kind == FILE else None
                with contextlib.suppress(ValueError, RecursionError):
                    if current is not None and json_document(loads_strict(current)) == file.text:
                        file = RenderedFile(file.name, current, file.executable)
        kept.append(file)
    return kept


def run(
    tree: Tree, sources: Sources, output_dir: Path, *, force: bool, dry_run: bool, session: Session | None = None
) -> Result:
    """Collect answers, decide, render, and (unless dry_run or refused) write.

    ``session`` lets the caller keep the answers collected so far when a later step fails.
    """
    check_output_dir(output_dir)  # before any question: a refused folder would waste the answers
    session = collect(tree, sources, session)
    # The batch answers follow the layout asked after them (a default global batch, a fitting micro-batch).
    session.answers = settle_batch(tree, session.answers, session.inputs, settle_given(session))
    rec = recommend(tree, session.answers, session.inputs)
    # A copy: the engine shares one FactSet between decisions of the same answers (derive_facts).
    rec = replace(rec, facts=replace(rec.facts, global_batch_given=GLOBAL_BATCH in session.given))
    if not rec.refused and GLOBAL_BATCH in session.given:
        # Only a global batch the user gave: a brought JSON at odds with itself is reconcile's to name.
        origin = session.origins.get(GLOBAL_BATCH)
        micro = session.origins.get("micro_batch_size") if "micro_batch_size" in session.given else None
        check_plan(
            rec.facts,
            origin if origin in ("--set", "answers file") else None,
            micro if micro in ("--set", "answers file") else None,
        )
    result = Result(session, rec)
    result.warnings = [*rec.warnings]
    for key in session.ignored:
        reason = not_asked_because(tree, key, session.answers, session.inputs)
        result.warnings.append(
            f"ignored '{key}': it does not apply to these answers" + (f" ({reason.rstrip('.')})" if reason else "")
        )
    offloads = any(rec.settings.get(key) not in (None, "none") for key in ("offload_optimizer", "offload_param"))
    # Axolotl's layer offloading sets no backend offload key, but it is offload all the same.
    offloads = offloads or rec.settings.get("strategy") in OFFLOAD_STRATEGIES
    result.find_levers = _lever_finder(tree, session, rec, offloads)
    result.levers_give_room = _room_levers_only(rec, offloads, session.answers)
    if rec.refused:
        return result
    ds = session.inputs.deepspeed
    if ds is not None:
        result.warnings += reconcile(
            ds,
            source=str(session.answers["deepspeed_config"]),
            gpu_bf16=bool(rec.facts.get("gpu_bf16")),
            method=session.answers["method"],
            world_size=int(rec.settings["num_processes"]),
            micro_batch_size=int(session.answers["micro_batch_size"]),
        )
    user_json = session.answers.get("deepspeed_config")
    plan = plan_render(tree, rec, session.answers, session.inputs.deepspeed_data if user_json else None)
    result.warnings += list(plan.notes)
    # The packages the files need, which the headers list under "Install first": said in the
    # summary too where they are missing here, or a first launch fails on an import the user never
    # saw coming. Found here (not imported), they are not repeated: the headers still list them for
    # the machines the files are copied to.
    from wizard import installed

    # Where the user declined to have this machine read, nothing is checked: every package the files need
    # is listed, said as not checked, so that the list is not missing from one run and present in another.
    # A plan for a Mac made on another machine: what is installed here says nothing of the Mac.
    checked = sources.read_machine and not installed.mac_plan_elsewhere(session.answers)
    result.warnings += [
        f"{'install first: ' if checked else 'install unchecked: '}{need.line()}"
        for need in plan.context.get("requirement_checks", ())
        if not checked or not installed.requirement_installed(need.modules, need.commands)
    ]
    files = render_plan(plan)
    result.warnings += self_check(
        files,
        int(rec.settings["num_processes"]),
        user_json,
        launch_mixed_precision=plan.context.get("launch_mixed_precision"),
    )
    if user_json:
        files = copied_json(output_dir, files)
    # answers.yaml names the set it belongs to, so a later --force run can remove what it drops.
    # A micro-batch the wizard picked for a given global batch is its own work, not an answer: left out,
    # a replay picks it again the same way, and `explain` on the file weighs the levers as this run did.
    picked = (
        "micro_batch_size"
        if GLOBAL_BATCH in session.given and session.origins.get("micro_batch_size") == "default"
        else None
    )
    saved = {key: value for key, value in session.answers.items() if key != picked}
    files.append(RenderedFile(ANSWERS_FILE, with_manifest(answers_document(tree, saved), files)))
    result.files = files
    result.actions = plan_writes(output_dir, files, force)
    if not dry_run and not result.conflicts:
        # The failed rules' sentences are rendered when first read (the explanation, the JSON report);
        # read here before any file is written, so a tree text that cannot render stops the run first.
        for entry in rec.trace:
            entry.sentences  # noqa: B018 (read for its check)
        result.actions = write_files(output_dir, files, force)
    return result
