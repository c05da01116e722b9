"""Rendering with jinja2 and writing files atomically."""
