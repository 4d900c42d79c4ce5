"""Helpers that more than one test module uses: import them from here, never from a test module."""
