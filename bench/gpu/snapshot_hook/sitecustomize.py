"""A torch CUDA memory snapshot of a trainer's first step, for bench/gpu/memory_snapshot.py.

Put this folder first on PYTHONPATH and set RLSWEEP_BENCH_SNAPSHOT=<file.pickle> for one `rlsweep trial`
(with RLSWEEP_COLD_START=1, so the trainer is a fresh process that imports this): in the trainer child
(`python -m trainers`) on a GPU, the first forward pass of any module starts torch's allocator history
(torch.cuda.memory._record_memory_history: every allocation and free with its Python stack), and the end
of the first optimizer step (or the process's exit, if none ends; not the zero-rate step that allocates
the optimizer's state before step 1) writes the snapshot there, with torch's own peaks beside it
(<file>.json). Everything before the first forward (the loaded weights) shows as blocks allocated before
the history. Any other process, or a run without CUDA, is left alone.
"""

import os
import sys

_OUT = os.environ.get("RLSWEEP_BENCH_SNAPSHOT")
_MAX_ENTRIES = int(os.environ.get("RLSWEEP_BENCH_SNAPSHOT_ENTRIES", "1000000"))
_state = {"armed": False, "dumped": False, "handles": []}


def _is_trainer() -> bool:
    main = (sys.argv[0] if sys.argv else "").replace("\\", "/")
    return main.endswith("trainers/__main__.py")


def _dump(reason: str) -> None:
    if _state["dumped"] or not _state["armed"]:
        return
    _state["dumped"] = True
    import json

    import torch

    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(_OUT)
    torch.cuda.memory._record_memory_history(enabled=None)
    gib = 2**30
    with open(_OUT + ".json", "w") as handle:
        json.dump(
            {
                "when": reason,
                "max_allocated_gib": torch.cuda.max_memory_allocated() / gib,
                "max_reserved_gib": torch.cuda.max_memory_reserved() / gib,
                "max_entries": _MAX_ENTRIES,
            },
            handle,
        )
    print(f"[snapshot] written to {_OUT} ({reason})", file=sys.stderr, flush=True)


def _priming() -> bool:
    """Whether the optimizer step ending now is the trainer's own before step 1 (trainers/optimizer_state.py
    `materialize`: a zero-rate step that allocates the moments), not the first training step's end."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "materialize" and code.co_filename.replace("\\", "/").endswith(
            "trainers/optimizer_state.py"
        ):
            return True
        frame = frame.f_back
    return False


def _first_forward(module, args):
    for handle in _state["handles"]:
        handle.remove()
    _state["handles"].clear()
    if not _is_trainer():
        return
    import atexit

    import torch

    if not torch.cuda.is_available():
        return
    torch.cuda.memory._record_memory_history(max_entries=_MAX_ENTRIES, stacks="python")
    _state["armed"] = True
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(
        lambda optimizer, a, k: _priming() or _dump("end of the first optimizer step")
    )
    atexit.register(_dump, "exit before an optimizer step ended")


def _watch() -> None:
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        """Registers the global forward pre-hook as soon as torch.nn.modules.module has run."""

        def find_spec(self, name, path, target=None):
            if name != "torch.nn.modules.module":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _state["handles"].append(module.register_module_forward_pre_hook(_first_forward))

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())


def _chain() -> None:
    """Run the sitecustomize this one hides (the next one on sys.path), as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        path = os.path.join(os.path.abspath(entry or "."), "sitecustomize.py")
        if os.path.dirname(path) != here and os.path.isfile(path):
            with open(path) as handle:
                exec(compile(handle.read(), path, "exec"), {"__name__": "sitecustomize", "__file__": path})
            return


if _OUT:
    _watch()
_chain()
