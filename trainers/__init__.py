"""The trainer child: one GRPO/GSPO trial on one stack (TRL or Unsloth), run as `python -m trainers
spec.json` or forked from trainers/forkserver.py, writing its events for the supervisor.

FACE names the modules the orchestrator may import from here; tests/unit/test_isolation.py fails on an
orchestrator import of any other. Each is light (no training library at import) or imported only
inside the function that needs it.
"""

FACE = (
    "trainers.control",  # the supervisor's word to a trainer at its hold step: continue or stop
    "trainers.distributed",  # the ranks of a multi-process trial: launch settings, rank event files
    "trainers.events",  # the event stream a trainer writes and the supervisor reads
    "trainers.forkserver",  # the warm trainer a trial forks from, and its messages
    "trainers.generation",  # the vLLM server's host and its CPU KV cache size
    "trainers.models",  # model names, sizes and the model cache
    "trainers.nvml",  # NVML readings, the visible devices
    "trainers.probe",  # the synthetic probe's kinds, decode windows and prefill chunks
    "trainers.record",  # the names, units and meaning of what a trainer records
    "trainers.session",  # a probe session's protocol: its events, which trials share one (session_key)
    "trainers.simulate",  # a trial's training step simulated on meta tensors (torch imported inside)
    "trainers.trial",  # a trial's settings (TrialSpec) and their rules
    "trainers.stacks",  # the stack registry: which stacks exist, each one's settings and needs
    "trainers.units",  # GIB
)
