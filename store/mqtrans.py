"""``MQTrans``: the checkpoint document, the point recovery starts from (JSON, written by
``Engine.checkpoint`` into the ping-pong pair ``MQTrans.lg1``/``MQTrans.lg2``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from store.logcodec import Ref

__all__ = ["Checkpoint"]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What ``MQTrans`` holds: the point recovery starts from."""

    epoch: int
    lsn: int
    qmlog_pos: int
    nonce: int
    next_segment: int
    next_tx: int
    next_seq: dict[int, int]
    prepared: dict[int, list[Ref]]  # prepared transaction -> the messages it receives
    segments: list[int]

    def encode(self) -> bytes:
        return json.dumps({
            "epoch": self.epoch, "lsn": self.lsn, "qmlog_pos": self.qmlog_pos,
            "nonce": self.nonce, "next_segment": self.next_segment, "next_tx": self.next_tx,
            "next_seq": {str(k): v for k, v in self.next_seq.items()},
            "prepared": {str(k): [[r.segment, r.offset, r.lsn] for r in v]
                         for k, v in self.prepared.items()},
            "segments": self.segments,
        }, separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes) -> Checkpoint:
        doc = json.loads(data)
        return Checkpoint(
            epoch=int(doc["epoch"]), lsn=int(doc["lsn"]), qmlog_pos=int(doc["qmlog_pos"]),
            nonce=int(doc["nonce"]), next_segment=int(doc["next_segment"]),
            next_tx=int(doc["next_tx"]),
            next_seq={int(k): int(v) for k, v in doc["next_seq"].items()},
            prepared={int(k): [Ref(*map(int, r)) for r in v]
                      for k, v in doc["prepared"].items()},
            segments=[int(n) for n in doc["segments"]],
        )
