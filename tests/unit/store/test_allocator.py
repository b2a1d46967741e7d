from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 40).map(lambda n: n * 64), min_size=1, max_size=80),
       st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 600)), max_size=12))
def test_bumping_the_current_area_places_exactly_as_allocate(sizes: list[int],
                                                            holes: list[tuple[int, int]]) -> None:
    """The writer's fast path (Engine._place_appends) bumps ``current()`` while it has room
    and calls ``allocate`` otherwise; the places must be those ``allocate`` alone gives."""
    areas = [Area(1 + i % 3, 64 + start * 64, 64 + (start + length) * 64)
             for i, (start, length) in enumerate(holes)]
    plain, fast = Allocator(), Allocator()
    plain.reset([Area(a.segment, a.cursor, a.end) for a in areas])
    fast.reset([Area(a.segment, a.cursor, a.end) for a in areas])
    for size in sizes:
        expected = plain.allocate(size)
        area = fast.current()
        if area is not None and area.end - area.cursor >= size:
            got: tuple[int, int] | None = (area.segment, area.cursor)
            area.cursor += size
        else:
            got = fast.allocate(size)
        assert got == expected
        if expected is None:  # a new segment, as the engine adds one
            plain.add_area(Area(99, 64, 1 << 20))
            fast.add_area(Area(99, 64, 1 << 20))
