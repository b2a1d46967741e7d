"""Signed SRMP messages (docs/srmp.md, "Signatures"): DSA over SignedInfo as written, SHA-1 or
MD5 body digests; every way a signature can be wrong is named."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric import dsa

from gateway.srmp.build import envelope_bytes
from gateway.srmp.envelope import parse_envelope
from gateway.srmp.model import INFINITE_TEXT, Envelope, MsmqHeader, Path, Reference
from gateway.srmp.signature import BadSignature, verify_signature
from tests.srmp_client import SENDER_QM, sign_envelope

KEY = dsa.generate_private_key(2048)
OTHER = dsa.generate_private_key(2048)
BODY = b"signed body"
BASE = Envelope(path=Path("MSMQ:x", "http://h/msmq/q", f"uuid:1@{SENDER_QM}"),
                expires_at=INFINITE_TEXT,
                msmq=MsmqHeader(body_type=0, source_qm=SENDER_QM))


def _parsed(envelope: Envelope) -> Envelope:
    return parse_envelope(envelope_bytes(envelope))


@pytest.mark.parametrize("digest", ["sha1", "md5"])
def test_a_good_signature_verifies_after_a_round_trip(digest: str) -> None:
    env = _parsed(sign_envelope(BASE, BODY, KEY, digest=digest))
    assert env.signature is not None
    assert len(env.signature.signature_value) == 88  # 512-bit r || s, as the spec says
    verify_signature(env.signature, body=BODY, extension=None, key=KEY.public_key())


def test_every_kind_of_bad_signature_is_named() -> None:
    env = _parsed(sign_envelope(BASE, BODY, KEY))
    sig = env.signature
    assert sig is not None
    with pytest.raises(BadSignature, match="digest of cid:body"):
        verify_signature(sig, body=b"tampered", extension=None, key=KEY.public_key())
    with pytest.raises(BadSignature, match="does not verify"):
        verify_signature(sig, body=BODY, extension=None, key=OTHER.public_key())
    tampered = replace(sig, signed_info=sig.signed_info.replace(b"SignatureMethod",
                                                                b"SignatureMethoD"))
    with pytest.raises(BadSignature, match="does not verify"):
        verify_signature(tampered, body=BODY, extension=None, key=KEY.public_key())
    with pytest.raises(BadSignature, match="not DSA"):
        verify_signature(replace(sig, signature_method="rsa"), body=BODY, extension=None,
                         key=KEY.public_key())
    three = sig.references * 3
    with pytest.raises(BadSignature, match="one body"):
        verify_signature(replace(sig, references=three), body=BODY, extension=None,
                         key=KEY.public_key())
    odd = replace(sig.references[0], digest_method="urn:sha256")
    with pytest.raises(BadSignature, match="neither SHA-1 nor MD5"):
        verify_signature(replace(sig, references=(odd,)), body=BODY, extension=None,
                         key=KEY.public_key())
    with pytest.raises(BadSignature, match="not base64"):
        verify_signature(replace(sig, signature_value="!!"), body=BODY, extension=None,
                         key=KEY.public_key())
    assert isinstance(sig.references[0], Reference)
