"""Views of a sweep's outputs: the report, compare, live progress."""
