"""Shared fixtures live in the test modules; tests/ is on sys.path through pyproject's `pythonpath`."""
