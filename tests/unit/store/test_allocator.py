from __future__ import annotations

from store.allocator import Allocator, Area


def test_fills_areas_as_chains_from_their_start() -> None:
    allocator = Allocator()
    allocator.reset([Area(1, 64, 256), Area(1, 512, 1024)])
    assert allocator.allocate(128) == (1, 64)
    assert allocator.allocate(128) == (1, 512), "the rest of the first area is too small"
    assert allocator.allocate(64) == (1, 640)
    assert allocator.allocate(1024) is None


def test_a_new_segment_is_used_even_behind_many_small_areas() -> None:
    allocator = Allocator()
    allocator.reset([Area(1, 64 * i * 2, 64 * i * 2 + 64) for i in range(1, 200)])
    assert allocator.allocate(4096) is None
    allocator.add_area(Area(2, 64, 1 << 20))
    assert allocator.allocate(4096) == (2, 64)


def test_free_bytes_and_dropping_a_segment() -> None:
    allocator = Allocator()
    allocator.reset([Area(1, 64, 1024), Area(2, 64, 128)])
    assert allocator.free_bytes() == 960 + 64
    allocator.drop_segment(1)
    assert allocator.free_bytes() == 64
    assert allocator.allocate(64) == (2, 64)
