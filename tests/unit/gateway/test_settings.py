from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gateway.errors import ConfigError
from gateway.settings import Settings, load_settings, parse_listen, parse_settings
from tests.helpers import REPO_ROOT

SHIPPED = REPO_ROOT / "config" / "entrepot.toml"


EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256(b"")

def test_defaults_match_the_issue() -> None:
    settings = parse_settings({})
    assert settings.server.listen == "127.0.0.1:8080"
    assert settings.store.data_dir == "./var/entrepot"
    assert settings.mapping.dir == "config/mapping"
    assert settings.store.segment_size == 4 << 20
    assert settings.store.machine_quota == 8 << 30
    assert settings.store.cleanup_interval == 30.0
    assert settings.store.archive_segments is False


def test_shipped_file_parses_to_the_built_in_defaults() -> None:
    """The shipped file shows every key with its default, so it must equal the built-ins."""
    assert load_settings(SHIPPED) == Settings()


def test_shipped_file_lists_every_key() -> None:
    doc = tomllib.loads(SHIPPED.read_text())
    defaults = Settings()
    for section in ("server", "store", "mapping", "srmp", "links", "auth", "transactions",
                    "log", "metrics"):
        fields = set(type(getattr(defaults, section)).__dataclass_fields__)
        assert set(doc[section]) == fields, section


def test_units_are_converted() -> None:
    settings = parse_settings(
        {"store": {"segment_size": "8MiB", "cleanup_interval": "500ms"},
         "server": {"shutdown_grace": "1m"}}
    )
    assert settings.store.segment_size == 8 << 20
    assert settings.store.cleanup_interval == 0.5
    assert settings.server.shutdown_grace == 60.0


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"store": {"segmnt_size": "4MiB"}}, "store.segmnt_size: unknown key"),
        ({"bogus": {}}, "bogus: unknown section"),
        ({"store": "x"}, "store: expected a table"),
        ({"store": {"segment_size": "4XB"}}, "store.segment_size: unknown size unit"),
        ({"store": {"segment_size": "1KiB"}}, "store.segment_size: '1KiB' is out of range"),
        ({"store": {"segment_size": True}}, "store.segment_size: expected a size"),
        ({"store": {"cleanup_interval": "soon"}}, "store.cleanup_interval:"),
        ({"server": {"concurrent_requests_max": "10"}}, "expected an integer"),
        ({"server": {"concurrent_requests_max": 0}}, "out of range"),
        ({"server": {"long_polls_max": 0}}, "server.long_polls_max: 0 is out of range"),
        ({"server": {"long_polls_max": "8"}}, "server.long_polls_max: expected an integer"),
        ({"store": {"archive_segments": "yes"}}, "store.archive_segments: expected true"),
        ({"log": {"format": "xml"}}, "log.format: expected one of text, json"),
        ({"server": {"listen": "localhost"}}, "server.listen: expected HOST:PORT"),
        ({"server": {"listen": "127.0.0.1:99999"}}, "server.listen: port must be"),
        ({"store": {"data_dir": ""}}, "store.data_dir: must not be empty"),
        ({"store": {"group_commit_bytes_max": "8MiB"}}, "store.group_commit_bytes_max"),
        # Not a multiple of 4 KiB: named as such, before what it is compared with.
        ({"store": {"segment_size": "65537"}}, "store.segment_size: 65537 bytes is not a "
                                               "multiple of 4 KiB"),
        ({"metrics": {"queues_max": 0}}, "metrics.queues_max: 0 is out of range"),
        ({"metrics": {"queues_max": "many"}}, "metrics.queues_max: expected an integer"),
        # URLs the gateway connects to or puts in what it sends.
        ({"srmp": {"public_url": "not a url"}}, "srmp.public_url: 'not a url' is not an http"),
        ({"peers": [{"url": "https://ok/*"}, {"url": "ftp://x"}]}, "peers[1].url: 'ftp://x'"),
        ({"webhooks": [{"url": "hook.example/x"}]}, "webhooks[0].url: 'hook.example/x'"),
        ({"peers": [{"url": "http://x:port/msmq"}]}, "peers[0].url: 'http://x:port/msmq' has a"),
        ({"nosuch": {}}, "known: server, store"),
        ({"nosuch": {}}, "[[queues]], [[partners]], [[peers]], [[webhooks]], [[landings]]"),
        # The SHA-256 of the empty key: Basic "user:" would match it.
        ({"auth": {"admin_key_sha256": EMPTY}}, "auth.admin_key_sha256: the SHA-256 of an "
                                                "empty key"),
        ({"auth": {"metrics_key_sha256": EMPTY.upper()}}, "auth.metrics_key_sha256: the SHA"),
        ({"partners": [{"name": "p", "api_key_sha256": EMPTY}]},
         "partners[0].api_key_sha256: the SHA-256 of an empty key"),
    ],
)
def test_bad_values_name_the_key(doc: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_settings(doc)
    assert fragment in str(info.value)


def test_overrides_beat_the_file() -> None:
    settings = parse_settings(
        {"server": {"listen": "127.0.0.1:9000"}, "store": {"data_dir": "/a"}},
        {"server.listen": "127.0.0.1:9001"},
    )
    assert settings.server.listen == "127.0.0.1:9001"
    assert settings.store.data_dir == "/a"


def test_overrides_are_checked_too() -> None:
    with pytest.raises(ConfigError, match="log.format"):
        parse_settings({}, {"log.format": "yaml"})


def test_load_settings_reports_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\nlisten=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:8080", ("127.0.0.1", 8080)), ("[::1]:80", ("::1", 80)),
     ("0.0.0.0:1", ("0.0.0.0", 1))],
)
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(AttributeError):
        settings.server.listen = "x"  # type: ignore[misc]


def test_declared_queues_are_parsed_and_checked() -> None:
    settings = parse_settings({"queues": [
        {"path": "private$/orders", "transactional": True, "quota": "1GiB"},
        {"path": "events"},
    ]})
    assert [q.path for q in settings.queues] == ["private$/orders", "events"]
    assert settings.queues[0].quota == 1 << 30
    for doc, fragment in (
        ({"queues": {"path": "x"}}, "queues: expected an array"),
        ({"queues": [{"transactional": True}]}, "queues[0].path: missing"),
        ({"queues": [{"path": "a b"}]}, "queues[0].path"),
        ({"queues": [{"path": "q"}, {"path": "Q"}]}, "queues[1].path: 'Q' is declared twice"),
        ({"queues": [{"path": "q", "colour": "red"}]}, "queues[0].colour: unknown key"),
        ({"queues": [{"path": "q", "quota": "lots"}]}, "queues[0].quota"),
    ):
        with pytest.raises(ConfigError) as info:
            parse_settings(doc)
        assert fragment in str(info.value)


def test_an_unreadable_webhook_secret_names_its_entry(tmp_path: Path) -> None:
    from gateway.web.app import load_webhooks

    settings = parse_settings({"webhooks": [
        {"url": "https://a.example/x"},
        {"url": "https://b.example/x", "hmac_secret_file": str(tmp_path / "missing")}]})
    with pytest.raises(ConfigError) as refused:
        load_webhooks(settings)
    assert str(refused.value).startswith("webhooks[1].hmac_secret_file: ")
