"""The pure engine: tree loading and linting, conditions, facts, memory model, evaluation."""
