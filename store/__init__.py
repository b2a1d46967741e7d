"""entrepot's message store: segments, records, transaction log, checkpoints, recovery.

Imports nothing from ``gateway`` or ``mapping``.
"""

from store.errors import StoreError
from store.message_store import MessageStore
from store.options import StoreOptions

__all__ = ["MessageStore", "StoreError", "StoreOptions"]
