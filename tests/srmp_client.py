"""Building SRMP requests for tests, with the gateway's own printer (checked byte-exact
against the spec's vectors in the unit tests)."""

from __future__ import annotations

from typing import Any

from gateway.srmp.build import SrmpRequest, build_request
from gateway.srmp.model import (
    INFINITE_TEXT,
    Envelope,
    MsmqHeader,
    Path,
    Services,
    Stream,
    format_srmp_time,
)

SENDER_QM = "4a85b192-3ccd-4ba2-a0ac-7f0a11be1b08"
STREAM_ID = f"uid:{SENDER_QM}\\4839986701558349830"


def user_message(to: str, body: bytes, *, ordinal: int, label: str = "test",
                 durable: bool = True, stream: Stream | None = None,
                 services: Services | None = None, dead_letter: bool = False,
                 now_s: int = 1_900_000_000, signer: Any = None) -> SrmpRequest:
    if services is None and (durable or stream is not None):
        services = Services(durable=True)
    envelope = Envelope(
        path=Path(action="MSMQ:" + label, to=to, id=f"uuid:{ordinal}@{SENDER_QM}"),
        expires_at=INFINITE_TEXT, sent_at=format_srmp_time(now_s), services=services,
        stream=stream,
        msmq=MsmqHeader(message_class=0, priority=0 if stream else 3, dead_letter=dead_letter,
                        body_type=0, hash_algorithm=32772, source_qm=SENDER_QM,
                        ttrq=format_srmp_time(now_s + 4 * 86400)))
    if signer is not None:
        envelope = sign_envelope(envelope, body, signer)
    parts = to.split("/", 3)
    host, path = (parts[2], "/" + parts[3]) if len(parts) == 4 else ("multicast", "/msmq")
    return build_request(envelope, body, host=host, path=path, boundary_number=ordinal)


def stream_message(to: str, body: bytes, current: int, *, receipts_to: str,
                   previous: int | None = None, stream_id: str = STREAM_ID) -> SrmpRequest:
    stream = Stream(stream_id, current, previous, receipts_to if current == 1 else None)
    return user_message(to, body, ordinal=1000 + current, stream=stream)


async def post(client: Any, request: SrmpRequest, path: str | None = None) -> Any:
    headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
    return await client.post(path or request.path, data=request.body, headers=headers)


def sign_envelope(envelope: Envelope, body: bytes, key: Any, *, digest: str = "sha1",
                  body_id: str = SENDER_QM) -> Envelope:
    """The envelope with a signature by DSA ``key`` over the body (docs/srmp.md,
    "Signatures")."""
    import base64
    import hashlib
    from dataclasses import replace

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    from gateway.srmp.model import Reference, Signature

    value = base64.b64encode(hashlib.new(digest, body).digest()).decode()
    ns = "http://www.w3.org/2000/02/xmldsig#"
    signed_info = (f'<SignedInfo><SignatureMethod Algorithm="{ns}dsa"></SignatureMethod>'
                   f'<Reference URI="cid:body@{body_id}"><DigestMethod Algorithm="{ns}{digest}">'
                   f"</DigestMethod><DigestValue>{value}</DigestValue></Reference></SignedInfo>"
                   ).encode()
    r, s = decode_dss_signature(key.sign(signed_info, hashes.SHA1()))
    half = 20 if key.key_size <= 1024 else 32
    raw = r.to_bytes(half, "big") + s.to_bytes(half, "big")
    reference = Reference(f"cid:body@{body_id}", f"{ns}{digest}", value)
    signature = Signature(f"{ns}dsa", (reference,), base64.b64encode(raw).decode(),
                          signed_info)
    return replace(envelope, signature=signature)
