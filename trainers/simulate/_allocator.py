"""PyTorch's CUDA caching allocator, replayed: what a trace of allocations and frees reserves.

The rules, as c10/cuda/CUDACachingAllocator.cpp has them with `expandable_segments:True` (the setting
rlsweep's trainers run with): a request is rounded up to 512 bytes; up to 1 MiB it is served from the
small pool, above from the large pool; each pool is one expandable segment that maps memory at its end
in pages of 2 MiB (small) or 20 MiB (large) when no free block fits, only what the request lacks beyond
a free block at the end. A request takes the smallest free block that fits (best fit, the lowest address
among equals), save that the free block at the segment's end counts as the size it could grow to (its
`expandable_size`), so it is taken only where no other free block fits. A block is split when what
remains is at least 512 bytes, in both pools (`should_split` under expandable segments; without them the
large pool keeps a remainder of up to 1 MiB inside the block). A freed block merges with free
neighbours. Nothing mapped is given back (no empty_cache) until the card runs out: reserved is what the
two segments have mapped.

Under a card's capacity (`Allocator(capacity)`, `replayed(trace, capacity=...)`), as the allocator behaves
on a card that runs out: a request that would map pages past the capacity first releases the cache
(release_cached_blocks, which with expandable segments unmaps every page lying wholly inside free
blocks, in both pools) and is retried; it fails only when the pages its live blocks touch, its own
included, exceed the capacity: live tensors plus the fragmentation no release removes (a page shared by
two live blocks, or by a live block and a free one). A block's address is chosen as without a cap (its
pages are mapped again where they were released), so whether a trace fails under a capacity is one
figure, `needed`: the most bytes the live blocks' pages ever touched. The peak reserved under the cap
is path-dependent (what was mapped when it first ran out) and at most the capacity.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20  # requests up to this go to the small pool
SMALL_PAGE = 2 << 20  # the small pool's segment grows by this
LARGE_PAGE = 20 << 20  # the large pool's segment grows by this


def round_size(size: int) -> int:
    return MIN_BLOCK if size < MIN_BLOCK else -(-size // MIN_BLOCK) * MIN_BLOCK


@dataclass
class _Pool:
    page: int
    min_split: int  # a free remainder is split off when it is at least this
    mapped: int = 0
    starts: list[int] = field(default_factory=list)  # every block's start, sorted
    sizes: dict[int, int] = field(default_factory=dict)  # start -> size
    free: set[int] = field(default_factory=set)  # starts of free blocks

    def take(self, size: int) -> int:
        """The start of the block serving `size` (already rounded)."""
        tail = self.starts[-1] if self.starts and self.starts[-1] in self.free else None
        fits = [(self.sizes[s], s) for s in self.free if self.sizes[s] >= size and s != tail]
        if fits:
            _, start = min(fits)
        elif tail is not None and self.sizes[tail] >= size:
            start = tail  # the end block's expandable size is all the segment could still map: taken last
        else:
            start = tail if tail is not None else self.mapped
            need = start + size
            grown = -(-need // self.page) * self.page
            if tail is None:
                self._add(start, grown - start, free=True)
            else:
                self.sizes[tail] = grown - tail
            self.mapped = grown
        remainder = self.sizes[start] - size
        if remainder >= self.min_split:
            self.sizes[start] = size
            self._add(start + size, remainder, free=True)
        self.free.discard(start)
        return start

    def give(self, start: int) -> None:
        self.free.add(start)
        i = bisect.bisect_left(self.starts, start)
        nxt = self.starts[i + 1] if i + 1 < len(self.starts) else None
        if nxt is not None and nxt in self.free:
            self.sizes[start] += self.sizes.pop(nxt)
            self.free.discard(nxt)
            self.starts.pop(i + 1)
        prev = self.starts[i - 1] if i > 0 else None
        if prev is not None and prev in self.free:
            self.sizes[prev] += self.sizes.pop(start)
            self.free.discard(start)
            self.starts.pop(i)

    def _add(self, start: int, size: int, free: bool) -> None:
        bisect.insort(self.starts, start)
        self.sizes[start] = size
        if free:
            self.free.add(start)


class OutOfMemory(Exception):
    """A request the capacity cannot hold even with the cache released: what torch raises as
    torch.OutOfMemoryError."""


def _pages(pool: _Pool, start: int, size: int) -> range:
    return range(start // pool.page, -(-(start + size) // pool.page))


class Allocator:
    """Replays allocations (`alloc(key, nbytes)`) and frees (`free(key)`); `reserved` and its peak, and
    `needed` (module doc). capacity: the bytes torch may map (the card less what is held outside torch);
    None, no limit. A request past it raises OutOfMemory."""

    def __init__(self, capacity: int | None = None):
        self.small = _Pool(SMALL_PAGE, MIN_BLOCK)
        self.large = _Pool(LARGE_PAGE, MIN_BLOCK)  # expandable segments split large blocks as small ones
        self.capacity = capacity
        self.blocks: dict[int, tuple[_Pool, int, int]] = {}  # key -> (pool, start, size)
        self.peak_reserved = 0
        self.needed = 0  # the most bytes the live blocks' pages touched at once
        self.releases = 0  # how often the cache was released for a request
        # Per pool: pages below its segment's end that a release unmapped, and how many live blocks
        # touch each page.
        self._holes: dict[int, set[int]] = {id(self.small): set(), id(self.large): set()}
        self._touched: dict[int, dict[int, int]] = {id(self.small): {}, id(self.large): {}}

    @property
    def reserved(self) -> int:
        return sum(p.mapped - len(self._holes[id(p)]) * p.page for p in (self.small, self.large))

    def _touched_bytes(self) -> int:
        return sum(len(self._touched[id(p)]) * p.page for p in (self.small, self.large))

    def _unmapped(self, pool: _Pool, pages: range, extent: int) -> list[int]:
        """The pages of `pages` not mapped, the segment's end having been `extent` before the request."""
        holes = self._holes[id(pool)]
        return [p for p in pages if p * pool.page >= extent or p in holes]

    def release(self) -> None:
        """release_cached_blocks: every page no live block touches is unmapped, in both pools."""
        self.releases += 1
        for pool in (self.small, self.large):
            touched = self._touched[id(pool)]
            self._holes[id(pool)] = {p for p in range(pool.mapped // pool.page) if p not in touched}

    def alloc(self, key: int, nbytes: int) -> None:
        size = round_size(nbytes)
        pool = self.small if size <= SMALL_SIZE else self.large
        extent = pool.mapped
        start = pool.take(size)
        pages = _pages(pool, start, size)
        touched = self._touched[id(pool)]
        fresh = sum(1 for p in pages if p not in touched) * pool.page
        self.needed = max(self.needed, self._touched_bytes() + fresh)
        missing = self._unmapped(pool, pages, extent)
        if self.capacity is not None and self.reserved - (pool.mapped - extent) + len(missing) * pool.page > (
            self.capacity
        ):
            self.release()
            missing = self._unmapped(pool, pages, extent)
            if self._touched_bytes() + fresh > self.capacity:
                pool.give(start)
                raise OutOfMemory(
                    f"{nbytes} bytes with {self._touched_bytes()} held by live blocks' pages, over the "
                    f"capacity of {self.capacity}"
                )
        holes = self._holes[id(pool)]
        holes.difference_update(missing)
        # the segment's end moved past pages this request does not touch: those stay unmapped
        holes.update(p for p in range(extent // pool.page, pool.mapped // pool.page) if p not in pages)
        for p in pages:
            touched[p] = touched.get(p, 0) + 1
        self.blocks[key] = (pool, start, size)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, key: int) -> None:
        found = self.blocks.pop(key, None)
        if found is not None:
            pool, start, size = found
            pool.give(start)
            touched = self._touched[id(pool)]
            for p in _pages(pool, start, size):
                touched[p] -= 1
                if not touched[p]:
                    del touched[p]


@dataclass(frozen=True)
class Replay:
    """A trace replayed: the peak reserved (bytes), `needed` (the least capacity it runs in), whether it
    ran out of the capacity, and how often the cache was released for a request."""

    peak_reserved: int
    needed: int
    failed: bool
    releases: int


def replayed(trace: list[tuple], repeat: int = 1, capacity: int | None = None) -> Replay:
    """A trace of ("a", key, nbytes) and ("f", key) events replayed, the storages made before the step
    first (up to its ("mark",)); the step's events are replayed `repeat` times (a step run again on the
    memory the one before left). capacity: the bytes torch may map (module doc); the replay stops at the
    first request that fails."""
    allocator = Allocator(capacity)
    marks = [i for i, event in enumerate(trace) if event[0] == "mark"]
    head, body = (trace[: marks[0]], trace[marks[0] + 1 :]) if marks else ([], trace)
    try:
        for event in head:
            _apply(allocator, event, 0)
        for round_ in range(repeat):
            for event in body:
                _apply(allocator, event, round_ + 1)
    except OutOfMemory:
        return Replay(allocator.peak_reserved, allocator.needed, True, allocator.releases)
    return Replay(allocator.peak_reserved, allocator.needed, False, allocator.releases)


def replay(trace: list[tuple], repeat: int = 1) -> int:
    """Peak reserved bytes of a trace replayed without a cap (replayed())."""
    return replayed(trace, repeat).peak_reserved


def _apply(allocator: Allocator, event: tuple, round_: int) -> None:
    if event[0] == "a":
        allocator.alloc((round_, event[1]) if round_ else event[1], event[2])
    elif event[0] == "f":
        key = event[1]
        for candidate in ((round_, key), (round_ - 1, key)) if round_ else ():
            if candidate in allocator.blocks:
                key = candidate
                break
        allocator.free(key)
