from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from store.bitmap import GranuleBitmap
from store.framing import GRANULE

SIZE = GRANULE * 300


def _model_runs(model: list[bool], occupied: bool) -> list[tuple[int, int]]:
    runs, start = [], None
    for index, value in enumerate(model + [not occupied]):
        if value == occupied and start is None:
            start = index
        elif value != occupied and start is not None:
            runs.append((start * GRANULE, index * GRANULE))
            start = None
    return runs


@given(st.lists(st.tuples(st.integers(0, 299), st.integers(1, 40), st.booleans()), max_size=40))
def test_runs_match_a_list_model(ops: list[tuple[int, int, bool]]) -> None:
    bitmap = GranuleBitmap(SIZE)
    model = [True] + [False] * 299
    for start, count, occupied in ops:
        count = min(count, 300 - start)
        bitmap.set_range(start * GRANULE, count * GRANULE, occupied=occupied)
        model[start: start + count] = [occupied] * count
    assert list(bitmap.runs(occupied=True)) == _model_runs(model, True)
    assert list(bitmap.runs(occupied=False)) == _model_runs(model, False)
    assert bitmap.occupied_bytes() == sum(model) * GRANULE
    epoch_bitmap = GranuleBitmap.decode(bitmap.encode(42), SIZE)
    assert epoch_bitmap is not None
    assert epoch_bitmap[0] == 42
    assert list(epoch_bitmap[1].runs(occupied=True)) == _model_runs(model, True)


def test_header_granule_is_occupied_from_the_start() -> None:
    bitmap = GranuleBitmap(SIZE)
    assert bitmap.is_occupied(0)
    assert list(bitmap.runs(occupied=False)) == [(GRANULE, SIZE)]


def test_allocate_free_reuse() -> None:
    bitmap = GranuleBitmap(SIZE)
    bitmap.set_range(GRANULE, 10 * GRANULE, occupied=True)
    bitmap.set_range(11 * GRANULE, 5 * GRANULE, occupied=True)
    bitmap.set_range(GRANULE, 10 * GRANULE, occupied=False)
    assert list(bitmap.runs(occupied=False))[0] == (GRANULE, 11 * GRANULE)
    bitmap.set_range(GRANULE, 4 * GRANULE, occupied=True)
    assert list(bitmap.runs(occupied=False))[0] == (5 * GRANULE, 11 * GRANULE)


def test_damaged_encoding_is_refused() -> None:
    data = bytearray(GranuleBitmap(SIZE).encode(1))
    for index in range(len(data)):
        damaged = bytearray(data)
        damaged[index] ^= 0x10
        assert GranuleBitmap.decode(damaged, SIZE) is None
    assert GranuleBitmap.decode(data[:-1], SIZE) is None
