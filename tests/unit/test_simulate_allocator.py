"""The caching allocator's replay (trainers/simulate/_allocator.py): the rules of PyTorch's CUDA caching
allocator with expandable segments, each on a trace whose answer follows from the rule alone."""

import pytest

from trainers.simulate._allocator import (
    LARGE_PAGE,
    SMALL_PAGE,
    Allocator,
    OutOfMemory,
    replay,
    replayed,
    round_size,
)

MIB = 1 << 20


def test_requests_round_up_to_512_bytes_and_small_ones_map_the_small_pools_2_mib_page():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    allocator = Allocator()
    allocator.alloc(1, 100)
    assert allocator.reserved == SMALL_PAGE  # up to 1 MiB: the small pool, mapped 2 MiB at a time


def test_a_large_pool_grows_in_20_mib_pages_and_reuses_a_freed_block_before_growing():
    allocator = Allocator()
    allocator.alloc(1, 15 * MIB)
    assert allocator.reserved == LARGE_PAGE
    allocator.alloc(2, 10 * MIB)  # 5 MiB are left: the segment maps another page
    assert allocator.reserved == 2 * LARGE_PAGE
    allocator.free(1)
    allocator.alloc(3, 12 * MIB)  # fits in the 15 MiB freed: no growth
    assert allocator.reserved == 2 * LARGE_PAGE


def test_the_best_fitting_free_block_is_taken_and_a_freed_block_merges_with_free_neighbours():
    allocator = Allocator()
    for key, size in ((1, 8), (2, 4), (3, 6), (4, 2)):  # MiB, in one 20 MiB page
        allocator.alloc(key, size * MIB)
    allocator.free(1)
    allocator.free(3)
    allocator.alloc(5, 5 * MIB)  # the 6 MiB hole fits better than the 8 MiB one
    _, start, _ = allocator.blocks[5]
    assert start == 12 * MIB
    allocator.free(2)  # 8 + 4 MiB free side by side: one block of 12 MiB
    allocator.alloc(6, 11 * MIB)
    assert allocator.reserved == LARGE_PAGE


def test_fragmentation_reserves_more_than_is_ever_allocated():
    # Two 12 MiB holes apart, each too small for 20 MiB: 40 MiB live at most, 60 MiB reserved.
    sizes = {1: 12, 2: 8, 3: 12, 4: 8}
    trace = [("a", k, s * MIB) for k, s in sizes.items()] + [("f", 1), ("f", 3), ("a", 5, 20 * MIB)]
    assert replay(trace) == 3 * LARGE_PAGE


def test_a_step_replayed_again_on_the_memory_the_first_left_reserves_no_more():
    trace = [("a", 0, 30 * MIB), ("mark",), ("a", 1, 10 * MIB), ("a", 2, 10 * MIB), ("f", 1), ("f", 2)]
    assert replay(trace, repeat=1) == replay(trace, repeat=3) == 3 * LARGE_PAGE


def test_under_expandable_segments_a_large_block_splits_off_a_remainder_under_1_mib():
    allocator = Allocator()
    allocator.alloc(1, 10 * MIB)
    allocator.alloc(2, 10 * MIB)  # the first 20 MiB page, full
    allocator.free(1)
    allocator.alloc(3, 9 * MIB + MIB // 2)  # half a MiB left of the hole: split off, free
    allocator.free(2)  # merges with it: 10.5 MiB free at the end
    allocator.alloc(4, 10 * MIB + MIB // 2)
    assert allocator.reserved == LARGE_PAGE  # were it kept inside 3, 10 MiB free: another page mapped


def test_the_free_block_at_the_segments_end_is_taken_only_where_no_other_fits():
    allocator = Allocator()
    allocator.alloc(1, 8 * MIB)
    allocator.alloc(2, 8 * MIB)  # 4 MiB free at the page's end
    allocator.free(1)  # an 8 MiB hole at the start
    allocator.alloc(3, 3 * MIB)  # the end block is the smaller fit, but it could grow: the hole is taken
    assert allocator.blocks[3][1] == 0
    allocator.alloc(4, 4 * MIB)  # the hole's 5 MiB left fit it
    allocator.alloc(5, 4 * MIB)  # only the end block fits now
    assert allocator.blocks[5][1] == 16 * MIB and allocator.reserved == LARGE_PAGE


# --- under a card's capacity: release the cache and retry, fail only on what live blocks need ---------


def _growing_then_shrinking():
    # 30 MiB freed before a live 10 MiB block; then 50 MiB: the hole is too small, so the segment grows
    # past the live block (5 pages mapped), while live blocks never touch more than 4 pages at once
    return [("a", 1, 30 * MIB), ("a", 2, 10 * MIB), ("f", 1), ("a", 3, 50 * MIB)]


def test_a_capacity_that_holds_the_uncapped_peak_changes_nothing():
    trace = _growing_then_shrinking()
    free_run, capped = replayed(trace), replayed(trace, capacity=replay(trace))
    assert (capped.peak_reserved, capped.failed, capped.releases) == (free_run.peak_reserved, False, 0)


def test_a_request_past_the_capacity_releases_the_cache_and_is_retried():
    trace = _growing_then_shrinking()
    assert replay(trace) == 5 * LARGE_PAGE  # uncapped: 2 pages for 1 and 2, 3 more at the end for 3
    capped = replayed(trace, capacity=4 * LARGE_PAGE)  # the hole's first page is unmapped, then 3 mapped
    assert not capped.failed and capped.releases == 1
    assert capped.peak_reserved == 4 * LARGE_PAGE == capped.needed  # what the card reads: never past the cap


def test_it_fails_only_where_live_blocks_need_more_than_the_capacity():
    trace = [("a", 1, 30 * MIB), ("a", 2, 30 * MIB)]  # both live: 60 MiB, 3 pages
    assert replayed(trace, capacity=3 * LARGE_PAGE).failed is False
    failed = replayed(trace, capacity=3 * LARGE_PAGE - 1)
    assert failed.failed and failed.releases == 1  # the cache was released first, and still no room


def test_a_page_two_live_blocks_share_is_fragmentation_no_release_removes():
    # 15 and 10 MiB live: 25 MiB of tensors, but the second crosses into a second page: 40 MiB needed
    allocator = Allocator(capacity=2 * LARGE_PAGE - MIB)
    allocator.alloc(1, 15 * MIB)
    with pytest.raises(OutOfMemory):
        allocator.alloc(2, 10 * MIB)
    assert replayed([("a", 1, 15 * MIB), ("a", 2, 10 * MIB)]).needed == 2 * LARGE_PAGE


def test_a_release_unmaps_free_pages_of_both_pools():
    allocator = Allocator(capacity=LARGE_PAGE + SMALL_PAGE)
    for key in range(4):  # 4 small blocks of 1 MiB: 2 pages of the small pool
        allocator.alloc(key, MIB)
    for key in range(4):
        allocator.free(key)
    assert allocator.reserved == 2 * SMALL_PAGE
    allocator.alloc(9, 15 * MIB)  # 20 MiB more would pass the cap: the small pool's free pages go
    assert allocator.releases == 1 and allocator.reserved == LARGE_PAGE


def test_pages_released_are_mapped_again_when_a_block_there_is_reused():
    allocator = Allocator(capacity=2 * LARGE_PAGE)
    allocator.alloc(1, 20 * MIB)
    allocator.alloc(2, 20 * MIB)
    allocator.free(1)
    allocator.alloc(3, 5 * MIB)  # in 1's freed page, still mapped: nothing released
    allocator.free(3)
    allocator.free(2)
    allocator.release()
    assert allocator.reserved == 0
    allocator.alloc(4, 5 * MIB)  # the first page again: mapped anew
    assert allocator.reserved == LARGE_PAGE


def test_needed_is_the_capacity_a_trace_runs_in_and_a_byte_less_fails():
    trace = [("a", 0, 3 * MIB), ("mark",)]
    for i in range(1, 40):  # live and freed blocks of mixed sizes, both pools
        trace.append(("a", i, (i * 7919) % (45 * MIB) + 256))
        if i % 3:
            trace.append(("f", i - 1))
    needed = replayed(trace, repeat=2).needed
    assert needed < replay(trace, repeat=2)  # the uncapped replay reserves more than the step needs
    assert replayed(trace, repeat=2, capacity=needed).failed is False
    assert replayed(trace, repeat=2, capacity=needed - 1).failed is True


def test_a_step_under_a_cap_reads_its_uncapped_peak_the_cap_or_runs_out():
    from trainers.simulate import SimulatedStep

    step = SimulatedStep(10.0, 13.0, "training", {"training": 10.0}, 2.0, 1.0, {}, 10.5)
    assert step.under_cap(14.0) == 13.0  # never released: the uncapped peak
    assert step.under_cap(12.0) == 12.0  # released and retried: held at the cap
    assert step.under_cap(10.4) is None  # live blocks' pages need more


def test_a_deep_steps_needed_is_its_allocated_plus_the_deeper_cuts_shared_pages():
    from trainers.simulate import SimulatedStep, _layers

    small = SimulatedStep(5.0, 6.0, "training", {"training": 5.0}, 1.0, 1.0, {}, 5.1)
    large = SimulatedStep(7.0, 8.0, "training", {"training": 7.0}, 1.0, 1.0, {}, 7.2)
    whole = _layers.extrapolated(small, large, (4, 8, 36), 1.0)
    assert whole.needed_gib == pytest.approx(whole.allocated_gib + 0.2)
    assert whole.needed_gib <= whole.reserved_gib
