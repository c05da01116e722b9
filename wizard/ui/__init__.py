"""User interface: questionary prompts and rich console output."""
