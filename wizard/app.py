"""The wizard as one call: answers in, recommendation and rendered files out.

No printing and no prompting here: the CLI supplies the prompter and prints the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from wizard.engine.deepspeed_json import reconcile
from wizard.engine.evaluate import Recommendation, recommend
from wizard.engine.tree import Tree, load_tree
from wizard.inputs import ANSWERS_SCHEMA_VERSION, read_tree_text
from wizard.render.context import ANSWERS_FILE, plan_render
from wizard.render.renderer import RenderedFile, render_plan
from wizard.render.writer import CONFLICT, FileAction, plan_writes, write_files
from wizard.resources import default_tree_path
from wizard.session import Session, Sources, collect


@dataclass
class Result:
    """Everything one run produced."""

    session: Session
    recommendation: Recommendation
    files: list[RenderedFile] = field(default_factory=list)
    actions: list[FileAction] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def conflicts(self) -> list[FileAction]:
        """Existing files with other content that --force would replace (nothing is written then)."""
        return [a for a in self.actions if a.action == CONFLICT]


def load(tree_path: Path | None = None) -> Tree:
    """Load and lint the decision tree (the shipped one by default)."""
    path = tree_path or default_tree_path()
    return load_tree(read_tree_text(path), str(path))


def answers_document(tree: Tree, answers: dict[str, Any]) -> str:
    """The answers actually used, in question order, as a replayable YAML file."""
    ordered = {qid: answers[qid] for qid in tree.question_ids if qid in answers}
    body = yaml.safe_dump(
        {"schema_version": ANSWERS_SCHEMA_VERSION, "answers": ordered}, sort_keys=False, allow_unicode=True
    )
    return "# Answers used by backend-wizard. Replay: backend-wizard --answers answers.yaml\n" + body


def run(tree: Tree, sources: Sources, output_dir: Path, *, force: bool, dry_run: bool) -> Result:
    """Collect answers, decide, render, and (unless dry_run or refused) write."""
    session = collect(tree, sources)
    rec = recommend(tree, session.answers, session.inputs)
    result = Result(session, rec)
    result.warnings = [*rec.warnings]
    result.warnings += [f"ignored '{key}': it does not apply to these answers" for key in session.ignored]
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
    plan = plan_render(tree, rec, session.answers, session.answers.get("deepspeed_config"))
    files = render_plan(plan)
    files.append(RenderedFile(ANSWERS_FILE, answers_document(tree, session.answers)))
    result.files = files
    result.actions = plan_writes(output_dir, files, force)
    if not dry_run and not result.conflicts:
        result.actions = write_files(output_dir, files, force)
    return result
