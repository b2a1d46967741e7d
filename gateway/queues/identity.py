"""The queue manager's identity: a GUID made once per data directory (``qm.json``)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from gateway.queues.tx_names import FILE_NAME

__all__ = ["BACKED_UP", "QM_FILE", "guid_in", "load_guid"]

QM_FILE = "qm.json"

# The data directory's files a backup keeps beside the store: the GUID (message ids, SRMP
# streams and receipts carry it: a restore must not make another queue manager) and the
# prepared transactions' ids and owners (their coordinators hold the ids).
BACKED_UP = (QM_FILE, FILE_NAME)


def guid_in(text: str) -> str | None:
    """The GUID a ``qm.json`` holds, or None when it holds none."""
    try:
        doc = json.loads(text)
        return str(uuid.UUID(doc["guid"])) if isinstance(doc, dict) else None
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def load_guid(data_dir: Path) -> str:
    """Read the GUID, or make and keep one on first start. Blocking."""
    path = data_dir / QM_FILE
    if path.exists():
        return str(json.loads(path.read_text())["guid"])
    guid = str(uuid.uuid4())
    building = path.with_name("qm.json.tmp")
    building.write_text(json.dumps({"guid": guid}))
    building.replace(path)
    return guid
