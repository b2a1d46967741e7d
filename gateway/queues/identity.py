"""The queue manager's identity: a GUID made once per data directory (``qm.json``)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from gateway.queues.tx_names import FILE_NAME

__all__ = ["BACKED_UP", "QM_FILE", "guid_in", "load_guid"]

QM_FILE = "qm.json"
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

# The data directory's files a backup keeps beside the store: the GUID (message ids, SRMP
# streams and receipts carry it: a restore must not make another queue manager) and the
# prepared transactions' ids and owners (their coordinators hold the ids).
BACKED_UP = (QM_FILE, FILE_NAME)


def guid_in(text: str) -> str | None:
    """The GUID a ``qm.json`` holds, as it is written there (message ids carry it), or None
    when it holds none in the 8-4-4-4-12 form."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    guid = doc.get("guid") if isinstance(doc, dict) else None
    return guid if isinstance(guid, str) and _GUID.fullmatch(guid) else None


def load_guid(data_dir: Path) -> str:
    """Read the GUID, or make and keep one on first start. Blocking.

    Raises:
        ValueError: ``qm.json`` holds no GUID: the gateway does not serve as some other queue
            manager, nor under a name that is not one.
    """
    path = data_dir / QM_FILE
    if path.exists():
        guid = guid_in(path.read_text(errors="replace"))
        if guid is None:
            raise ValueError(f"{path} holds no queue manager GUID: restore it from a backup "
                             "(entrepot restore), or move it away to start as a new queue "
                             "manager")
        return guid
    guid = str(uuid.uuid4())
    building = path.with_name("qm.json.tmp")
    building.write_text(json.dumps({"guid": guid}))
    building.replace(path)
    return guid
