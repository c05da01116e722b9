"""backend-wizard: pick a distributed-training backend, learn why, and write configs that run.

Layers, each depending only on the ones below it:

* ``wizard.engine``: the pure engine (tree loading and linting, conditions, facts, the memory
  model, evaluation). No prompts, no printing, no file writes.
* ``wizard.inputs`` / ``wizard.session``: reading files the answers point to, and the single
  question loop shared by prompts, answers files and ``--set``.
* ``wizard.render``: jinja2 rendering and atomic writing.
* ``wizard.ui``: questionary prompts (``prompts``) and rich output (``console``).
* ``wizard.cli``: argument parsing and exit codes.
"""

__version__ = "0.1.0"
