"""Read-only data catalogues shipped with the package (known models and GPUs)."""
