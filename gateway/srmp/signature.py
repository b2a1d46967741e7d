"""SRMP message signatures: the old XML-DSig profile of MC-MQSRM §2.2.7 (pure).
docs/srmp.md, "Signatures".

What is checked, and the two readings the spec leaves open:
- ``SignatureMethod`` must be ``http://www.w3.org/2000/02/xmldsig#dsa``; 1 or 2 ``Reference``
  elements, at most one for ``cid:body@...`` and one for ``cid:extension@...``.
- Each reference's ``DigestValue`` is the SHA-1 (``...#sha1``, the default) or MD5
  (``...#md5``) of the raw property bytes (the body, the extension), not of canonical XML.
  The spec also mentions the property "preceded by a keyword"; without a capture of a real
  signed message we digest the raw bytes.
- ``SignatureValue`` is DSA over the ``SignedInfo`` element *as it appears in the envelope*
  (Windows builds the envelope by string concatenation and signs the string it inserts),
  hashed with SHA-1; the value is r || s, each half of its length, big-endian.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import dsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from gateway.srmp.errors import SrmpError
from gateway.srmp.model import Signature

__all__ = ["BadSignature", "verify_signature", "DSA_METHOD", "SHA1", "MD5"]

DSA_METHOD = "http://www.w3.org/2000/02/xmldsig#dsa"
SHA1 = "http://www.w3.org/2000/02/xmldsig#sha1"
MD5 = "http://www.w3.org/2000/02/xmldsig#md5"


class BadSignature(SrmpError):
    """The signature does not verify (MQMSG_CLASS_NACK_BAD_SIGNATURE)."""


def verify_signature(signature: Signature, *, body: bytes, extension: bytes | None,
                     key: dsa.DSAPublicKey) -> None:
    """Raises: BadSignature naming the first check that fails."""
    if signature.signature_method != DSA_METHOD:
        raise BadSignature(f"signature method {signature.signature_method!r} is not DSA")
    references = signature.references
    kinds = [r.uri.split("@", 1)[0].lower() for r in references]
    if not 1 <= len(references) <= 2 or len(set(kinds)) != len(kinds) or not set(kinds) <= {
            "cid:body", "cid:extension"}:
        raise BadSignature("a signature needs one body and at most one extension reference")
    for ref, kind in zip(references, kinds):
        data = body if kind == "cid:body" else (extension or b"")
        method = ref.digest_method or SHA1
        if method == SHA1:
            digest = hashlib.sha1(data).digest()
        elif method == MD5:
            digest = hashlib.md5(data).digest()
        else:
            raise BadSignature(f"digest method {method!r} is neither SHA-1 nor MD5")
        if base64.b64encode(digest).decode() != ref.digest_value.strip():
            raise BadSignature(f"the digest of {ref.uri} does not match")
    try:
        raw = base64.b64decode(signature.signature_value.strip(), validate=True)
    except ValueError:
        raise BadSignature("SignatureValue is not base64") from None
    if not raw or len(raw) % 2:
        raise BadSignature("SignatureValue is not r || s")
    half = len(raw) // 2
    der = encode_dss_signature(int.from_bytes(raw[:half], "big"),
                               int.from_bytes(raw[half:], "big"))
    try:
        key.verify(der, signature.signed_info, hashes.SHA1())
    except InvalidSignature:
        raise BadSignature("the DSA signature over SignedInfo does not verify") from None
