"""Credentials, signatures, replay, rate limits and allow lists (pure parts)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gateway.auth.authenticator import Authenticator, AuthError, Credentials
from gateway.auth.hmac_sig import NonceCache, SignatureError, parse_authorization, sign, verify
from gateway.auth.principal import OPEN, Principal
from gateway.auth.ratelimit import TokenBucket
from gateway.auth.tls import subject_matches
from gateway.errors import ConfigError
from gateway.settings import parse_settings

SECRET = b"0123456789abcdef0123456789abcdef"
NONCE = "n0nce-0000000001"


def _settings(tmp_path: Path, **partner: object) -> object:
    secret = tmp_path / "acme.secret"
    secret.write_bytes(SECRET + b"\n")
    table = {"name": "acme", "hmac_secret_file": str(secret),
             "api_key_sha256": hashlib.sha256(b"acme-key").hexdigest(),
             "cert_subject": "CN=acme.example.com, O=Acme", "send": ["private$/in_*"],
             "receive": ["private$/acme_out"], **partner}
    return parse_settings({"auth": {"admin_key_sha256": hashlib.sha256(b"root").hexdigest()},
                           "partners": [table]})


def _creds(authorization: str = "", subject: str = "", body: bytes = b"x") -> Credentials:
    return Credentials(authorization, subject, "POST", "/v1/queues/private$/in_a/messages",
                       body)


def test_api_keys_hmac_and_certificates_name_principals(tmp_path: Path) -> None:
    auth = Authenticator(_settings(tmp_path))  # type: ignore[arg-type]
    assert auth.required
    assert auth.authenticate(_creds("Bearer root"), now=0).admin  # type: ignore[union-attr]
    acme = auth.authenticate(_creds("Bearer acme-key"), now=0)
    assert acme is not None and acme.name == "acme" and not acme.admin
    signed = sign(SECRET, "POST", "/v1/queues/private$/in_a/messages", 1000, NONCE, b"x",
                  "acme")
    assert auth.authenticate(_creds(signed), now=1001) == acme
    with pytest.raises(AuthError, match="replayed"):
        auth.authenticate(_creds(signed), now=1002)
    cert = auth.authenticate(_creds(subject="O=acme,CN=ACME.example.com,C=FR"), now=0)
    assert cert == acme
    assert auth.authenticate(_creds(subject="CN=other"), now=0) is None
    assert auth.authenticate(_creds(), now=0) is None
    with pytest.raises(AuthError, match="unknown API key"):
        auth.authenticate(_creds("Bearer nope"), now=0)
    with pytest.raises(AuthError, match="unknown API key"):
        auth.authenticate(_creds("Basic Zm9vOmJhcg=="), now=0)  # foo:bar
    with pytest.raises(AuthError, match="malformed Basic"):
        auth.authenticate(_creds("Basic !!!"), now=0)
    with pytest.raises(AuthError, match="unsupported"):
        auth.authenticate(_creds("Digest username=x"), now=0)


@pytest.mark.parametrize("mutate,match", [
    (lambda h: h.replace("ts=1000", "ts=1001"), "signature does not match"),
    (lambda h: h.replace("partner=acme", "partner=bob"), "no partner 'bob'"),
    (lambda h: h.replace(f"nonce={NONCE}", "nonce=short"), "nonce must be"),
    (lambda h: h.split(", sig=")[0], "lacks sig"),
])
def test_bad_signatures_are_refused(tmp_path: Path, mutate: object, match: str) -> None:
    auth = Authenticator(_settings(tmp_path))  # type: ignore[arg-type]
    signed = sign(SECRET, "POST", "/v1/queues/private$/in_a/messages", 1000, NONCE, b"x",
                  "acme")
    with pytest.raises(AuthError, match=match):
        auth.authenticate(_creds(mutate(signed)), now=1000)  # type: ignore[operator]


def test_signature_covers_body_and_time() -> None:
    header = sign(SECRET, "POST", "/p?q=1", 1000, NONCE, b"body", "acme")
    signed = parse_authorization(header)
    verify(signed, SECRET, method="POST", path_qs="/p?q=1", body=b"body", now=1100,
           window_s=300)
    with pytest.raises(SignatureError, match="does not match"):
        verify(signed, SECRET, method="POST", path_qs="/p?q=1", body=b"b0dy", now=1000,
               window_s=300)
    with pytest.raises(SignatureError, match="outside the replay window"):
        verify(signed, SECRET, method="POST", path_qs="/p?q=1", body=b"body", now=1301,
               window_s=300)


def test_nonce_cache_is_bounded_and_forgets_after_twice_the_window() -> None:
    cache = NonceCache(window_s=10, entries_max=2)
    assert cache.admit("a", "n1", 0) is True and cache.admit("a", "n1", 1) is False
    assert cache.admit("b", "n1", 1) is True
    assert cache.admit("a", "n2", 2) is None  # full: refuse rather than forget a live nonce
    assert cache.admit("a", "n2", 25) is True and len(cache) == 1


def test_token_bucket() -> None:
    bucket = TokenBucket(rate=2, burst=2)
    assert bucket.take(0.0) == 0 and bucket.take(0.0) == 0
    wait = bucket.take(0.0)
    assert wait == pytest.approx(0.5) and TokenBucket.retry_after(wait) == "1"
    assert bucket.take(0.5) == 0


def test_allow_lists() -> None:
    partner = Principal("p", send=("private$/in_*", "orders"), receive=("PRIVATE$\\Out",))
    assert partner.may("send", "private$/in_x") and partner.may("send", "orders")
    assert not partner.may("send", "private$/out") and partner.may("receive", "private$/out")
    assert not partner.may("receive", "orders")
    assert OPEN.may("send", "anything")


def test_subjects_match_as_sets_of_pairs() -> None:
    assert subject_matches("CN=a, O=B", "O=b,CN=A,C=FR")
    assert not subject_matches("CN=a,O=B", "CN=a")
    assert not subject_matches("", "CN=a")


@pytest.mark.parametrize("partner,message", [
    ({"name": "x"}, "has no credential"),
    ({"name": "x", "api_key_sha256": "abc"}, "64 hex digits"),
    ({"api_key_sha256": "0" * 64}, "missing"),
])
def test_partner_config_errors_name_the_key(partner: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_settings({"partners": [partner]})


def test_unreadable_secret_file_is_a_config_error(tmp_path: Path) -> None:
    settings = parse_settings({"partners": [{"name": "x", "hmac_secret_file": str(
        tmp_path / "missing")}]})
    with pytest.raises(ConfigError, match="partners.x.hmac_secret_file"):
        Authenticator(settings)
