"""The caching allocator's replay (trainers/simulate/_allocator.py): the rules of PyTorch's CUDA caching
allocator with expandable segments, each on a trace whose answer follows from the rule alone."""

from trainers.simulate._allocator import LARGE_PAGE, SMALL_PAGE, Allocator, replay, round_size

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
    _, start = allocator.blocks[5]
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
