"""The headers a webhook link sends with a message (pure).

A message's properties become the REST API's ``Mq-*`` headers. Their values come from the
internet (an SRMP label may hold ``&#13;&#10;``, a batch label any character), so a value
a header cannot carry as it is travels percent-encoded (UTF-8) with ``Mq-Label-Encoding:
percent`` beside it: no value can add a header line or end the head of the request.
"""

from __future__ import annotations

import re
import secrets
import time
from urllib.parse import quote, urlsplit

from gateway.auth.hmac_sig import sign
from gateway.queues.manager import ReceivedMessage

__all__ = ["webhook_headers", "safe_content_type"]

_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")
_TOKEN_TYPE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+/[!#$%&'*+.^_`|~0-9A-Za-z-]+"
                         r"(\s*;\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+=(\"[^\"\\\x00-\x1f]*\"|"
                         r"[!#$%&'*+.^_`|~0-9A-Za-z-]+))*$")
_OCTETS = "application/octet-stream"


def safe_content_type(value: str) -> str:
    """``value`` when it is a well-formed media type, application/octet-stream otherwise."""
    return value if value and _TOKEN_TYPE.match(value) else _OCTETS


def webhook_headers(message: ReceivedMessage, name: str, secret: bytes, url: str
                    ) -> dict[str, str]:
    """The message's properties as headers, with its Content-Type (as ``safe_content_type``
    gives it); signed when a secret is set (the same EP-HMAC-SHA256 scheme partners use
    towards this gateway, covering these headers)."""
    props = message.properties
    headers = {"Content-Type": safe_content_type(props.content_type),
               "Mq-Message-Id": message.message_id, "Idempotency-Key": message.message_id,
               "Mq-Priority": str(props.priority),
               "Mq-Correlation-Id": props.correlation_id,
               "Mq-Sent-At": str(props.sent_at_ms)}
    headers = {k: v for k, v in headers.items() if v and not _UNSAFE.search(v)}
    if props.label:
        if _UNSAFE.search(props.label):
            headers["Mq-Label"] = quote(props.label, safe="")
            headers["Mq-Label-Encoding"] = "percent"
        else:
            headers["Mq-Label"] = props.label
    if secret:
        target = urlsplit(url)
        path_qs = target.path + (f"?{target.query}" if target.query else "")
        headers["Authorization"] = sign(secret, "POST", path_qs, int(time.time()),
                                        secrets.token_urlsafe(18), message.body, name,
                                        headers=headers.items())
    return headers
