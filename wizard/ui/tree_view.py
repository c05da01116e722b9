"""The decision tree drawn in the terminal with rich."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree as RichTree

from wizard.engine.conditions import AllOf, AnyOf, Condition, Not, condition_text
from wizard.engine.tree import Question, Tree


def _add_condition(branch: RichTree, cond: Condition) -> None:
    if isinstance(cond, AllOf | AnyOf) and cond.items:
        node = branch.add("[italic]all of[/]" if isinstance(cond, AllOf) else "[italic]any of[/]")
        for item in cond.items:
            _add_condition(node, item)
    elif isinstance(cond, Not):
        _add_condition(branch.add("[italic]not[/]"), cond.item)
    else:
        branch.add(escape(condition_text(cond)))


def _add_question(branch: RichTree, number: int, q: Question) -> None:
    when = f" [dim]when {escape(condition_text(q.when))}[/]" if q.when else ""
    node = branch.add(f"{number}. [bold]{q.id}[/] ({q.type}): {escape(q.prompt)}{when}")
    for choice in q.choices:
        disabled = ""
        if choice.disabled_when:
            when_text = escape(condition_text(choice.disabled_when))
            disabled = f" [dim](unavailable when {when_text}: {escape(str(choice.disabled_reason))})[/]"
        node.add(f"{choice.id}: {escape(choice.title)}{disabled}")


def print_tree(console: Console, tree: Tree) -> None:
    """Questions in asking order, the rules in the order they are tested, then the add-ons."""
    root = RichTree(f"[bold]{escape(tree.source)}[/]")
    questions = root.add("[bold]Questions[/] (asked in this order)")
    addons = [q for q in tree.questions if q.id in tree.addon_ids]
    for number, q in enumerate((q for q in tree.questions if q.id not in tree.addon_ids), 1):
        _add_question(questions, number, q)
    rules = root.add("[bold]Rules[/] (tested in order; the first that holds decides)")
    for rule in tree.rules:
        outcome = (
            "[red]refuse[/]"
            if rule.outcome.refuse
            else f"[green]{escape(tree.backends[str(rule.outcome.backend)].title)}[/]"
        )
        node = rules.add(
            f"[bold]{rule.id}[/] → {outcome} [dim]({rule.guidance}: {escape(tree.guidance[rule.guidance])})[/]"
        )
        _add_condition(node, rule.when)
    if addons:
        branch = root.add("[bold]Add-ons[/] (asked after the decision, when they apply to it)")
        for number, q in enumerate(addons, 1):
            _add_question(branch, number, q)
    console.print(root)
