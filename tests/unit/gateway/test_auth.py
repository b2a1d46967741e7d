"""Credentials, signatures, replay, rate limits and allow lists (pure parts)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from gateway.auth.authenticator import (
    MARK_AHEAD_S,
    Authenticator,
    AuthError,
    Credentials,
    RateLimited,
)
from gateway.auth.hmac_sig import (
    NonceCache,
    SignatureError,
    parse_authorization,
    sign,
    string_to_sign,
    verify,
)
from gateway.auth.principal import OPEN, Principal
from gateway.auth.ratelimit import TokenBucket
from gateway.auth.tls import parse_subject, subject_key
from gateway.errors import ConfigError
from gateway.settings import parse_settings

SECRET = b"0123456789abcdef0123456789abcdef"
NONCE = "n0nce-0000000001"


def _settings(tmp_path: Path, **partner: object) -> object:
    secret = tmp_path / "acme.secret"
    secret.write_bytes(SECRET + b"\n")
    table = {"name": "acme", "hmac_secret_file": str(secret),
             "api_key_sha256": hashlib.sha256(b"acme-key").hexdigest(),
             "cert_subject": "CN=acme.example.com,O=Acme", "send": ["private$/in_*"],
             "receive": ["private$/acme_out"], **partner}
    return parse_settings({"auth": {"admin_key_sha256": hashlib.sha256(b"root").hexdigest()},
                           "partners": [table]})


def _name(*rdns: list[tuple[x509.ObjectIdentifier, str]]) -> x509.Name:
    """A certificate subject from its RDNs, first RDN first."""
    return x509.Name([x509.RelativeDistinguishedName(
        [x509.NameAttribute(oid, value) for oid, value in rdn]) for rdn in rdns])


CN, O, OU, C = (NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME,
                NameOID.ORGANIZATIONAL_UNIT_NAME, NameOID.COUNTRY_NAME)
ACME = _name([(O, "Acme")], [(CN, "acme.example.com")])


def _creds(authorization: str = "", subject: x509.Name | None = None, body: bytes = b"x",
           headers: tuple[tuple[str, str], ...] = ()) -> Credentials:
    return Credentials(authorization, None if subject is None else subject_key(subject), "POST",
                       "/v1/queues/private$/in_a/messages", body, headers)


def _sign(nonce: str = NONCE, ts: int = 1000, partner: str = "acme",
          headers: tuple[tuple[str, str], ...] = ()) -> str:
    return sign(SECRET, "POST", "/v1/queues/private$/in_a/messages", ts, nonce, b"x", partner,
                headers=headers)


def test_api_keys_hmac_and_certificates_name_principals(tmp_path: Path) -> None:
    auth = Authenticator(_settings(tmp_path))  # type: ignore[arg-type]
    assert auth.required

    def who(creds: Credentials, now: float = 0) -> Principal | None:
        return auth.authenticate(creds, now=now, monotonic=0)

    assert who(_creds("Bearer root")).admin  # type: ignore[union-attr]
    acme = who(_creds("Bearer acme-key"))
    assert acme is not None and acme.name == "acme" and not acme.admin
    assert who(_creds(_sign()), now=1001) == acme
    with pytest.raises(AuthError, match="replayed"):
        who(_creds(_sign()), now=1002)
    # An authentication scheme's name is case-insensitive (RFC 9110 11.1), as Bearer's is.
    lower = _sign(nonce=NONCE[::-1]).replace("EP-HMAC-SHA256 ", "ep-hmac-sha256 ")
    assert lower.startswith("ep-hmac-sha256 ") and who(_creds(lower), now=1001) == acme
    assert who(_creds(subject=_name([(CN, "acme.example.com")], [(O, "Acme")]))) == acme
    assert who(_creds(subject=_name([(CN, "other")]))) is None
    assert who(_creds()) is None
    with pytest.raises(AuthError, match="unknown API key"):
        who(_creds("Bearer nope"))
    with pytest.raises(AuthError, match="unknown API key"):
        who(_creds("Basic Zm9vOmJhcg=="))  # foo:bar
    with pytest.raises(AuthError, match="malformed Basic"):
        who(_creds("Basic !!!"))
    with pytest.raises(AuthError, match="unsupported"):
        who(_creds("Digest username=x"))
    # An empty key is no credential, however it comes (a hash of "" is refused in the
    # config too: gateway.settings_values).
    # Blank too: a key hash the configuration takes (of " ", say) can never be matched.
    for empty in ("Bearer", "Bearer ", "bearer   ", "Basic eDo=", "Basic Og==", "Basic",
                  "Basic OiA=", "Basic eDoJ"):  # ": ", "x:\t"
        with pytest.raises(AuthError, match="the API key is empty"):
            who(_creds(empty))


@pytest.mark.parametrize("mutate,match", [
    (lambda h: h.replace("ts=1000", "ts=1001"), "signature does not match"),
    (lambda h: h.replace("partner=acme", "partner=bob"), "no partner 'bob'"),
    (lambda h: h.replace(f"nonce={NONCE}", "nonce=short"), "nonce must be"),
    (lambda h: h.split(", sig=")[0], "lacks sig"),
    (lambda h: h.replace("ts=1000", "ts=01000"), "no leading zero"),
])
def test_bad_signatures_are_refused(tmp_path: Path, mutate: object, match: str) -> None:
    auth = Authenticator(_settings(tmp_path))  # type: ignore[arg-type]
    with pytest.raises(AuthError, match=match):
        auth.authenticate(_creds(mutate(_sign())), now=1000,  # type: ignore[operator]
                          monotonic=0)


def test_signature_covers_body_and_time() -> None:
    header = sign(SECRET, "POST", "/p?q=1", 1000, NONCE, b"body", "acme", headers=())
    signed = parse_authorization(header)
    verify(signed, SECRET, method="POST", path_qs="/p?q=1", body=b"body", headers=(),
           now=1100, window_s=300)
    with pytest.raises(SignatureError, match="does not match"):
        verify(signed, SECRET, method="POST", path_qs="/p?q=1", body=b"b0dy", headers=(),
               now=1000, window_s=300)
    with pytest.raises(SignatureError, match="outside the replay window"):
        verify(signed, SECRET, method="POST", path_qs="/p?q=1", body=b"body", headers=(),
               now=1301, window_s=300)


SIGNED_HEADERS = (("Content-Type", "application/json"), ("Mq-Destination", "DIRECT=OS:.\\q"),
                  ("mq-label", "  two  words\t"), ("Accept", "*/*"), ("MQ-LABEL", "again"),
                  ("Idempotency-Key", "k1"), ("Mq-Admin-Queue", ""))


def test_the_string_to_sign_is_canonical() -> None:
    """The documented canonical form, byte for byte: lower-case names sorted, repeats in the
    order sent, outer spaces and tabs dropped, inner ones kept, other headers left out."""
    digest = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"  # "x"
    assert string_to_sign("post", "/p?q=1", 1000, NONCE, b"x", SIGNED_HEADERS) == (
        f"POST\n/p?q=1\n1000\n{NONCE}\n{digest}\n"
        "content-type:application/json\nidempotency-key:k1\nmq-admin-queue:\n"
        "mq-destination:DIRECT=OS:.\\q\nmq-label:two  words\nmq-label:again").encode()
    assert string_to_sign("POST", "/p?q=1", 1000, NONCE, b"x", ()) == (
        f"POST\n/p?q=1\n1000\n{NONCE}\n{digest}").encode()


@pytest.mark.parametrize("change", [
    lambda h: [*h, ("Mq-Destination", "DIRECT=OS:.\\other")],  # a second one
    lambda h: [p for p in h if p[0] != "Mq-Admin-Queue"],  # one removed
    lambda h: [(n, "text/plain" if n == "Content-Type" else v) for n, v in h],
    lambda h: [(n, "k2" if n == "Idempotency-Key" else v) for n, v in h],
    lambda h: [*h, ("Mq-Priority", "7")],  # a covered header the signer did not send
    lambda h: [*h[4:], *h[:4]],  # the two Mq-Label values swapped
    lambda h: [(n, "two words" if v == "  two  words\t" else v) for n, v in h],
])
def test_any_change_to_a_covered_header_breaks_the_signature(change: object) -> None:
    signed = parse_authorization(sign(SECRET, "POST", "/p", 1000, NONCE, b"x", "acme",
                                      headers=SIGNED_HEADERS))
    verify(signed, SECRET, method="POST", path_qs="/p", body=b"x", now=1000, window_s=300,
           headers=[*SIGNED_HEADERS, ("User-Agent", "any"), ("mq-label", "again")][:-1])
    with pytest.raises(SignatureError, match="does not match"):
        verify(signed, SECRET, method="POST", path_qs="/p", body=b"x", now=1000,
               window_s=300, headers=change(list(SIGNED_HEADERS)))  # type: ignore[operator]


def test_a_header_value_no_request_can_carry_is_not_signed() -> None:
    with pytest.raises(ValueError, match="Mq-Label"):
        sign(SECRET, "POST", "/p", 1000, NONCE, b"x", "acme",
             headers=[("Mq-Label", "a\r\nMq-Destination: x")])


def test_nonce_cache_is_bounded_and_forgets_after_twice_the_window() -> None:
    cache = NonceCache(window_s=10, entries_max=2)
    assert cache.check("n1", 0) is True
    cache.add("n1", 0)
    assert cache.check("n1", 1) is False
    assert cache.check("n2", 1) is True  # checked, not added: takes no slot
    cache.add("n3", 1)
    assert cache.check("n2", 2) is None  # full: refuse rather than forget a live nonce
    assert cache.check("n2", 25) is True and len(cache) == 0


def test_each_partner_has_its_own_nonce_cache(tmp_path: Path) -> None:
    secret = tmp_path / "bob.secret"
    secret.write_bytes(SECRET)
    settings = parse_settings({"auth": {"nonces_max": 1000}, "partners": [
        {"name": "acme", "hmac_secret_file": str(secret)},
        {"name": "bob", "hmac_secret_file": str(secret)}]})
    auth = Authenticator(settings)
    for n in range(1000):
        auth.authenticate(_creds(_sign(f"nonce-acme-{n:06d}")), now=1000, monotonic=0)
    with pytest.raises(OverflowError, match="'acme'"):
        auth.authenticate(_creds(_sign("nonce-acme-full-1")), now=1000, monotonic=0)
    # bob is served, even with a nonce acme used: each partner has its own nonces.
    bob = auth.authenticate(_creds(_sign("nonce-acme-000000", partner="bob")), now=1000,
                            monotonic=0)
    assert bob is not None and bob.name == "bob"
    with pytest.raises(AuthError, match="replayed"):
        auth.authenticate(_creds(_sign("nonce-acme-000000", partner="bob")), now=1000,
                          monotonic=0)


def test_a_rate_limited_request_takes_no_nonce_and_no_other_partners_token(tmp_path: Path
                                                                           ) -> None:
    secret = tmp_path / "s.secret"
    secret.write_bytes(SECRET)
    settings = parse_settings({"partners": [
        {"name": "acme", "hmac_secret_file": str(secret), "rate": 1, "burst": 1},
        {"name": "bob", "hmac_secret_file": str(secret), "rate": 1, "burst": 1}]})
    auth = Authenticator(settings)
    assert auth.authenticate(_creds(_sign("nonce-first-00001")), now=1000, monotonic=0)
    with pytest.raises(RateLimited) as refused:
        auth.authenticate(_creds(_sign("nonce-second-0001")), now=1000, monotonic=0.5)
    assert refused.value.wait_s == pytest.approx(0.5)
    bob = auth.authenticate(_creds(_sign("nonce-first-00001", partner="bob")), now=1000,
                            monotonic=0.5)
    assert bob is not None and bob.name == "bob"
    # The refused request's nonce was not used up: sent again once a token is back, it passes.
    again = auth.authenticate(_creds(_sign("nonce-second-0001")), now=1001, monotonic=1.0)
    assert again is not None and again.name == "acme"


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


CONFIGURED = "OU=b,OU=a,CN=units+OU=east,O=Units\\, Inc."  # RFC 4514: the last RDN first
UNITS = [[(O, "Units, Inc.")], [(OU, "east"), (CN, "units")], [(OU, "a")], [(OU, "b")]]


@pytest.mark.parametrize("rdns,matches", [
    (UNITS, True),
    ([UNITS[3], UNITS[1], UNITS[0], UNITS[2]], True),  # RDN order does not matter
    ([UNITS[0], [(CN, "units"), (OU, "east")], UNITS[2], UNITS[3]], True),
    ([UNITS[0], [(OU, "east")], [(CN, "units")], UNITS[2], UNITS[3]], False),  # split RDN
    (UNITS[:3], False),  # one OU missing
    ([*UNITS, [(OU, "b")]], False),  # OU=b twice
    ([*UNITS, [(C, "FR")]], False),  # an extra attribute
    ([[(O, "Units")], [(O, " Inc.")], *UNITS[1:]], False),  # the comma is in the value
    ([[(O, "units, inc.")], *UNITS[1:]], False),  # values compare exactly
    ([[(O, "Units, Inc.")], [(OU, "east+CN=units")], UNITS[2], UNITS[3]], False),
])
def test_subjects_match_attribute_for_attribute(rdns: list[list[tuple[x509.ObjectIdentifier,
                                                                      str]]],
                                                matches: bool) -> None:
    configured = subject_key(parse_subject(CONFIGURED))
    assert (subject_key(_name(*rdns)) == configured) is matches


def test_a_subject_spelled_inside_a_value_is_not_the_subject() -> None:
    """The reported injection: one O attribute whose value reads like the partner's
    subject (``O="Other,CN=acme.example.com,O=Acme"``)."""
    configured = subject_key(parse_subject("CN=acme.example.com,O=Acme"))
    assert subject_key(ACME) == configured
    for value in ("Other,CN=acme.example.com,O=Acme", "Acme,CN=acme.example.com",
                  "Acme+CN=acme.example.com"):
        assert subject_key(_name([(O, value)])) != configured
        assert subject_key(_name([(O, value)], [(CN, "acme.example.com")])) != configured


class _Transport:
    """What PeerSubjects reads of a TLS transport: the verified-certificate dict and the
    certificate itself."""

    def __init__(self, verified: bool, der: bytes) -> None:
        self.verified, self.der = verified, der

    def get_extra_info(self, name: str) -> object:
        if name == "peercert":
            return {"subject": ()} if self.verified else {}
        return self if name == "ssl_object" else None

    def getpeercert(self, binary_form: bool) -> bytes:
        return self.der


def test_peer_subjects_come_from_verified_certificates_and_are_kept_bounded(
        tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    from gateway.auth.tls import PeerSubjects, create_self_signed

    ders = []
    for n in range(3):
        cert, _ = create_self_signed(tmp_path / str(n), common_name=f"c{n}", names=[], days=1)
        ders.append(x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(
            serialization.Encoding.DER))
    subjects = PeerSubjects(entries_max=2)
    want = [subject_key(_name([(O, "entrepot development")], [(CN, f"c{n}")]))
            for n in range(3)]

    def of(verified: bool, der: bytes) -> object:
        return subjects.of(_Transport(verified, der))  # type: ignore[arg-type]

    for _ in range(2):  # three certificates through a cache of two, twice
        assert [of(True, der) for der in ders] == want
        assert len(subjects) == 2
    assert of(True, ders[2]) == want[2]  # a hit
    assert of(False, ders[0]) is None  # presented but not verified
    assert of(True, b"not a certificate") is None
    assert subjects.of(None) is None


@pytest.mark.parametrize("text", ["CN=acme.example.com, O=Acme", 'O="Acme, Inc."', " ", "CN",
                                  "XX=1", "CN=a,,O=b", "CN=a\\"])
def test_configured_subjects_that_are_not_rfc_4514_are_config_errors(tmp_path: Path,
                                                                     text: str) -> None:
    settings = parse_settings({"partners": [{"name": "acme", "api_key_sha256": "0" * 64,
                                             "cert_subject": text}]})
    with pytest.raises(ConfigError, match=r"partners\[0\]\.cert_subject"):
        Authenticator(settings)


def test_two_partners_with_one_subject_are_a_config_error() -> None:
    settings = parse_settings({"partners": [
        {"name": "acme", "cert_subject": "CN=a,O=b"},
        {"name": "bob", "cert_subject": "O=b,CN=a"}]})
    with pytest.raises(ConfigError, match=r"partners\[1\]\.cert_subject: the same subject as "
                                          "partner 'acme'"):
        Authenticator(settings)


def test_keywords_and_dotted_oids() -> None:
    assert subject_key(parse_subject("EMAILADDRESS=x@y.example,cn=a")) == subject_key(
        _name([(CN, "a")], [(NameOID.EMAIL_ADDRESS, "x@y.example")]))
    assert subject_key(parse_subject("2.5.4.3=a")) == subject_key(_name([(CN, "a")]))


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
    with pytest.raises(ConfigError, match=r"partners\[0\]\.hmac_secret_file"):
        Authenticator(settings)


def test_signatures_ahead_of_the_clock_are_marked_now_and_then(tmp_path: Path) -> None:
    """A mark goes out before a signature ahead of the clock is taken, covering the next
    MARK_AHEAD_S seconds of them; one on time is never marked."""
    auth = Authenticator(_settings(tmp_path))
    written: list[dict[str, int]] = []
    auth.mark = lambda marks: written.append(dict(marks)) is None  # written
    on_time = [auth.authenticate(_creds(_sign(f"nonce-on-time-{n:04d}", ts=1000)),
                                 now=1000.5, monotonic=n) for n in range(3)]
    assert all(p is not None for p in on_time) and written == []
    for n, ts in enumerate([1030, 1031, 1030 + MARK_AHEAD_S, 1031 + MARK_AHEAD_S]):
        auth.authenticate(_creds(_sign(f"nonce-ahead-{n:06d}", ts=ts)), now=1000,
                          monotonic=10 + n)
    assert written == [{"acme": 1030 + MARK_AHEAD_S}, {"acme": 1031 + 2 * MARK_AHEAD_S}]
    # after a crash, the mark refuses what it covers, and nothing after it
    auth.signed_after_by_partner = {"acme": 1031 + 2 * MARK_AHEAD_S}
    with pytest.raises(AuthError, match="clock ahead"):
        auth.authenticate(_creds(_sign("nonce-after-crash-1", ts=1031 + 2 * MARK_AHEAD_S)),
                          now=1040, monotonic=20)
    assert auth.authenticate(_creds(_sign("nonce-after-crash-2", ts=1032 + 2 * MARK_AHEAD_S)),
                             now=1040, monotonic=21) is not None
