"""Subcommands of backend-wizard (estimate, explain, tree, glossary): argument parsing and wiring.

Each module has `add_arguments(parser)` and `run(args, out, err) -> int`; they print only through
`wizard.ui` and raise `WizardError` for anything the user can fix.
"""
