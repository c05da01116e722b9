"""The decision tree drawn in the terminal with rich."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree as RichTree

from wizard.engine.conditions import AllOf, AnyOf, Condition, Not, condition_text
from wizard.engine.tree import Tree


def _add_condition(branch: RichTree, cond: Condition) -> None:
    if isinstance(cond, AllOf | AnyOf) and cond.items:
        node = branch.add("[italic]all of[/]" if isinstance(cond, AllOf) else "[italic]any of[/]")
        for item in cond.items:
            _add_condition(node, item)
    elif isinstance(cond, Not):
        _add_condition(branch.add("[italic]not[/]"), cond.item)
    else:
        branch.add(escape(condition_text(cond)))


def print_tree(console: Console, tree: Tree) -> None:
    """Questions in asking order, then the rules in the order they are tested."""
    root = RichTree(f"[bold]{escape(tree.source)}[/]")
    questions = root.add("[bold]Questions[/] (asked in this order)")
    for number, q in enumerate(tree.questions, 1):
        when = f" [dim]when {escape(condition_text(q.when))}[/]" if q.when else ""
        node = questions.add(f"{number}. [bold]{q.id}[/] ({q.type}): {escape(q.prompt)}{when}")
        for choice in q.choices:
            disabled = ""
            if choice.disabled_when:
                when_text = escape(condition_text(choice.disabled_when))
                disabled = f" [dim](unavailable when {when_text}: {escape(str(choice.disabled_reason))})[/]"
            node.add(f"{choice.id}: {escape(choice.title)}{disabled}")
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
    console.print(root)
