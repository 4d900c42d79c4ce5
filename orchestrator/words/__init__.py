"""The orchestrator's shared words, below every job that uses them: trial statuses (outcome), the
verdicts' names (verdicts), the settings a sweep file sets with their defaults (settings), the phases
and the packing rule (phases), storage paths (storage), the output dir's run lock (runlock), and how a
duration reads (text).

Imports nothing of the orchestrator outside this package; tests/unit/test_isolation.py holds that.
"""
