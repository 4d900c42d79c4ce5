"""The sweep's spec (validation of a sweep file) and its plan (the trials, in order)."""
