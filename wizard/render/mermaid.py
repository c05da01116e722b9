"""The decision tree as a Mermaid flowchart (for the README and `backend-wizard tree --format mermaid`)."""

from __future__ import annotations

from wizard.engine.conditions import condition_text
from wizard.engine.tree import Question, Tree


def _label(*lines: str) -> str:
    # Mermaid labels are quoted; quotes and angle brackets in the text are written as entities.
    escaped = (line.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;") for line in lines)
    return '"' + "<br/>".join(escaped) + '"'


def tree_to_mermaid(tree: Tree) -> str:
    """The questions (in asking order), the rule chain (first match wins) and the add-ons as a flowchart."""
    lines = ["flowchart TD"]
    decision = [q for q in tree.questions if q.id not in tree.addon_ids]
    addons = [q for q in tree.questions if q.id in tree.addon_ids]
    previous = _question_chain(lines, "questions", "Questions, asked in order", decision)
    lines.append(f"  {previous} --> R_{tree.rules[0].id}")
    backends_drawn: set[str] = set()
    for index, rule in enumerate(tree.rules):
        node = f"R_{rule.id}"
        lines.append(f"  {node}{{{_label(f'{rule.id} ({rule.guidance})', condition_text(rule.when))}}}")
        target = "REFUSE" if rule.outcome.refuse else f"B_{rule.outcome.backend}"
        if target not in backends_drawn:
            backends_drawn.add(target)
            title = "no backend fits: refuse" if rule.outcome.refuse else tree.backends[str(rule.outcome.backend)].title
            lines.append(f"  {target}([{_label(title)}])")
        lines.append(f"  {node} -- yes --> {target}")
        if index + 1 < len(tree.rules):
            lines.append(f"  {node} -- no --> R_{tree.rules[index + 1].id}")
    if addons:
        _question_chain(lines, "addons", "Add-ons, asked after the decision when they apply", addons)
        for target in sorted(backends_drawn - {"REFUSE"}):
            lines.append(f"  {target} --> addons")
    return "\n".join(lines) + "\n"


def _question_chain(lines: list[str], name: str, title: str, questions: list[Question]) -> str:
    """A subgraph of questions in asking order; returns the last node."""
    lines.append(f"  subgraph {name} [{title}]")
    lines.append("    direction TB")
    previous = ""
    for question in questions:
        node = f"Q_{question.id}"
        when = (f"when {condition_text(question.when)}",) if question.when else ()
        lines.append(f"    {node}[{_label(question.id, *when)}]")
        if previous:
            lines.append(f"    {previous} --> {node}")
        previous = node
    lines.append("  end")
    return previous
