"""SeenIds: the latest foreign ids seen, bounded, oldest out first."""

from __future__ import annotations

from gateway.queues.seen_ids import SeenIds


def test_the_oldest_id_goes_first_when_the_limit_is_reached() -> None:
    seen = SeenIds(limit=3)
    for seq, message_id in enumerate(("a", "b", "c", "d"), 1):
        seen.note(7, message_id, seq)
    assert len(seen) == 3
    assert seen.get(7, "a") is None
    assert (seen.get(7, "b"), seen.get(7, "d")) == (2, 4)
    assert seen.get(8, "b") is None, "ids are per queue"
    seen.note(7, "b", 20)  # seen again: the newest sequence wins
    assert seen.get(7, "b") == 20
