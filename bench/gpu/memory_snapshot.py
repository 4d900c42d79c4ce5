"""What holds GPU memory at the peak of a trainer's first step, from a torch CUDA memory snapshot.

Taking one: `rlsweep trial ...` with bench/gpu/snapshot_hook first on PYTHONPATH, RLSWEEP_COLD_START=1 and
RLSWEEP_BENCH_SNAPSHOT=<file.pickle> (bench/gpu/snapshot_hook/sitecustomize.py says what it records), e.g.

    RLSWEEP_COLD_START=1 RLSWEEP_BENCH_SNAPSHOT=/tmp/trl.pickle PYTHONPATH=bench/gpu/snapshot_hook:$PYTHONPATH \\
        python -m orchestrator.cli trial --stack trl --model random:Qwen/Qwen2.5-1.5B-Instruct \\
        --max-steps 1 --probe-steps 1 --probe-kind synthetic --output-dir /tmp/snap-trl
    python bench/gpu/memory_snapshot.py /tmp/trl.pickle --top 25 > /tmp/trl-snapshot.txt

The summary replays the allocator's history backwards from the snapshot's live blocks (torch's own
snapshot format: `segments` with their blocks, `device_traces` with every alloc and free) to the moment
the most memory was allocated, then lists the blocks live then, largest first, each with the Python
frames that allocated it (torch's own wrappers left out), and the same memory summed by the innermost
frame outside torch: what holds memory at the peak, by source line. Blocks allocated before the history
began (the loaded weights) have no frames and are summed as such.
"""

from __future__ import annotations

import argparse
import pickle
from collections import defaultdict
from pathlib import Path

GIB = 2**30
LIVE_STATES = ("active_allocated", "active_pending_free")
# frames inside these are torch's machinery, not what asked for the memory
MACHINERY = ("/torch/nn/modules/module.py", "/torch/utils/_contextlib.py", "<frozen", "/torch/_dynamo/")


def live_blocks(snapshot: dict, device: int) -> dict[int, tuple[int, list]]:
    """address -> (size, frames) of every block live when the snapshot was taken, on `device`."""
    live = {}
    for segment in snapshot.get("segments", []):
        if segment.get("device", 0) != device:
            continue
        address = segment["address"]
        for block in segment.get("blocks", []):
            if block.get("state") in LIVE_STATES:
                live[block.get("address", address)] = (block["size"], block.get("frames") or [])
            address += block["size"]
    return live


def at_peak(snapshot: dict, device: int = 0) -> tuple[int, int, dict[int, tuple[int, list]]]:
    """(peak bytes allocated, index of the trace event right after the peak, the blocks live then):
    walking the trace backwards from the live blocks, an `alloc` did not exist before it and a
    `free_completed` did."""
    traces = snapshot.get("device_traces", [])
    trace = traces[device] if device < len(traces) else []

    def walk(stop: int):
        live = live_blocks(snapshot, device)
        total = sum(size for size, _ in live.values())
        best, best_at = total, len(trace)
        for i in range(len(trace) - 1, stop - 1, -1):
            event = trace[i]
            if event["action"] == "alloc":
                size, _ = live.pop(event["addr"], (event["size"], None))
                total -= size
            elif event["action"] == "free_completed":
                live[event["addr"]] = (event["size"], event.get("frames") or [])
                total += event["size"]
            else:
                continue
            if total > best:
                best, best_at = total, i
        return best, best_at, live

    best, best_at, _ = walk(0)
    _, _, live = walk(best_at)  # the state before event best_at: the peak's
    return best, best_at, live


def frames_text(frames: list, limit: int = 6) -> list[str]:
    kept = [f for f in frames if not any(m in f.get("filename", "") for m in MACHINERY)]
    return [f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '?')}" for f in kept[:limit]]


def owner(frames: list) -> str:
    """The innermost frame outside torch (the first one listed), else the innermost frame at all."""
    for frame in frames:
        name = frame.get("filename", "")
        if "/torch/" not in name and "<frozen" not in name:
            return f"{name}:{frame.get('line', '?')} {frame.get('name', '?')}"
    if frames:
        return f"{frames[0].get('filename', '?')}:{frames[0].get('line', '?')} {frames[0].get('name', '?')}"
    return "(allocated before the history began: the loaded weights and whatever came before)"


def summary(snapshot: dict, top: int = 20, device: int = 0) -> str:
    peak, index, live = at_peak(snapshot, device)
    traces = snapshot.get("device_traces", [])
    events = len(traces[device]) if device < len(traces) else 0
    lines = [
        f"peak allocated {peak / GIB:.3f} GiB in {len(live)} blocks, before trace event {index} of {events}",
        "",
        f"largest {min(top, len(live))} blocks live at the peak:",
    ]
    for size, frames in sorted(live.values(), key=lambda b: -b[0])[:top]:
        lines.append(f"  {size / GIB:8.3f} GiB")
        lines.extend(f"      {text}" for text in frames_text(frames) or ["(no frames)"])
    by_owner: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for size, frames in live.values():
        by_owner[owner(frames)][0] += size
        by_owner[owner(frames)][1] += 1
    lines += ["", "live at the peak, by the innermost frame outside torch:"]
    for name, (size, count) in sorted(by_owner.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {size / GIB:8.3f} GiB  {count:6d} blocks  {name}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot", type=Path, help="a pickle from torch.cuda.memory._dump_snapshot")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    with args.snapshot.open("rb") as handle:
        snapshot = pickle.load(handle)
    print(summary(snapshot, args.top, args.device), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
