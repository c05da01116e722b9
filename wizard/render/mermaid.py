"""The decision tree as a Mermaid flowchart (for the README and `backend-wizard tree --format mermaid`)."""

from __future__ import annotations

from wizard.engine.conditions import condition_text
from wizard.engine.tree import Tree


def _label(*lines: str) -> str:
    # Mermaid labels are quoted; quotes and angle brackets in the text are written as entities.
    escaped = (line.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;") for line in lines)
    return '"' + "<br/>".join(escaped) + '"'


def tree_to_mermaid(tree: Tree) -> str:
    """The questions (in asking order) and the rule chain (first match wins) as a flowchart."""
    lines = ["flowchart TD"]
    lines.append("  subgraph questions [Questions, asked in order]")
    lines.append("    direction TB")
    previous = None
    for question in tree.questions:
        node = f"Q_{question.id}"
        when = (f"when {condition_text(question.when)}",) if question.when else ()
        lines.append(f"    {node}[{_label(question.id, *when)}]")
        if previous:
            lines.append(f"    {previous} --> {node}")
        previous = node
    lines.append("  end")
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
    return "\n".join(lines) + "\n"
