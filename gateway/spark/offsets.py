"""The stream's offsets (pure): each queue's next sequence, with the queue's incarnation.

An offset is ``{queue: [sequence, created_ms]}``: ``created_ms`` is when the gateway created
the queue (``head``), so a queue deleted and created again, whose sequences start over, is
told apart from the one a checkpoint read. Offsets written before incarnations were kept,
``{queue: sequence}``, are read too, once the consumer's position agrees with them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mapping.errors import QueueNameError
from mapping.names import parse_queue_path

__all__ = ["by_queue", "canonical", "fair_shares", "joining", "stamped", "unstamped",
           "wrong_incarnations"]


def canonical(name: str) -> str:
    """A queue's canonical name as the gateway compares names (lower case, ``/`` for
    ``\\``); a name the gateway would refuse is left as it is (the gateway says why)."""
    try:
        return parse_queue_path(name).canonical
    except QueueNameError:
        return name


def by_queue(offsets: Mapping[str, Any]) -> dict[str, int]:
    """Offsets as Spark hands them back from a checkpoint, by canonical queue name (a
    checkpoint written by a run that spelled a queue otherwise, or before names were
    canonical, still gives each queue its offset)."""
    return {canonical(str(queue)): int(value[0] if isinstance(value, list) else value)
            for queue, value in offsets.items()}


def joining(head: Mapping[str, Any], consumer: str) -> int:
    """Where a queue the checkpoint has not read starts: where the query's consumer left it
    (a queue taken out of the list and put back), else at the queue's first message."""
    position = head.get("consumers", {}).get(consumer)
    return int(head["first"]) if position is None else int(position)


def stamped(positions: Mapping[str, int], heads: Mapping[str, Mapping[str, Any]]
            ) -> dict[str, list[int]]:
    """Offsets of ``positions`` with each queue's incarnation from its ``head``."""
    return {queue: [position, int(heads[queue].get("created_ms", 0))]
            for queue, position in positions.items()}


def unstamped(offsets: Mapping[str, Any]) -> dict[str, int]:
    """The offsets of ``offsets`` written without the queue's incarnation, by queue."""
    return {canonical(str(queue)): int(value) for queue, value in offsets.items()
            if not isinstance(value, list)}


def wrong_incarnations(offsets: Mapping[str, Any], heads: Mapping[str, Mapping[str, Any]]
                       ) -> list[str]:
    """The queues of ``offsets`` whose incarnation is not the one ``heads`` show now."""
    wrong = []
    for queue, value in offsets.items():
        name = canonical(str(queue))
        if isinstance(value, list) and len(value) > 1 and name in heads and int(
                value[1]) != int(heads[name].get("created_ms", 0)):
            wrong.append(name)
    return wrong


def fair_shares(budget: int, backlogs: Sequence[int]) -> list[int]:
    """Split a batch's message budget between queues so that none starves: each queue with a
    backlog first gets up to an equal part of half the budget, the rest goes in proportion to
    what remains of each backlog (largest remainders first, then list order). Never more
    than a backlog; the whole budget when the backlogs exceed it."""
    shares = [0] * len(backlogs)
    active = [i for i, b in enumerate(backlogs) if b > 0]
    if sum(backlogs[i] for i in active) <= budget:
        return [max(0, b) for b in backlogs]
    floor = max(1, budget // (2 * len(active)))
    left = budget
    for i in active:  # the guaranteed part, in list order while the budget lasts
        shares[i] = min(backlogs[i], floor, left)
        left -= shares[i]
    rest = {i: backlogs[i] - shares[i] for i in active if backlogs[i] > shares[i]}
    total = sum(rest.values())
    if left and total:
        exact = {i: left * r / total for i, r in rest.items()}
        given = {i: min(rest[i], int(x)) for i, x in exact.items()}
        for i, n in given.items():
            shares[i] += n
        left -= sum(given.values())
        order = sorted(rest, key=lambda i: (-(exact[i] - given[i]), i))
        while left:  # rounding leftovers, one each; a full queue is skipped
            open_ = [i for i in order if shares[i] < backlogs[i]]
            if not open_:
                break
            for i in open_[:left]:
                shares[i] += 1
                left -= 1
    return shares
