"""Signature nonces and marks across starts (gateway.auth.nonce_file), on a data directory
of its own: what a crash left unknown is refused, whatever files a start finds."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gateway.auth.authenticator import MARK_AHEAD_S, Authenticator, AuthError, Credentials
from gateway.auth.hmac_sig import sign
from gateway.auth.nonce_file import MARKS_FILE, NONCES_FILE, load_nonces, save_nonces
from gateway.settings import parse_settings

SECRET = b"0123456789abcdef0123456789abcdef"
PATH = "/v1/queues/q/messages"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data directory after a first run that opened its store (and may have had traffic)
    and then crashed: nothing saved, its marks written."""
    (tmp_path / "acme.secret").write_bytes(SECRET)
    data = tmp_path / "data"
    data.mkdir()
    _start(data)  # the first start: nothing to refuse yet
    (data / "qm.json").write_text("{}")
    return data


def _start(data_dir: Path) -> Authenticator:
    auth = Authenticator(parse_settings({"partners": [{
        "name": "acme", "hmac_secret_file": str(data_dir.parent / "acme.secret")}]}))
    load_nonces(auth, data_dir)
    return auth


def _take(auth: Authenticator, ts: int, nonce: str) -> None:
    header = sign(SECRET, "POST", PATH, ts, nonce, b"x", "acme", headers=())
    auth.authenticate(Credentials(header, None, "POST", PATH, b"x", ()), now=time.time(),
                      monotonic=time.monotonic())


def test_after_a_crash_the_starts_own_second_is_refused(data_dir: Path) -> None:
    auth = _start(data_dir)  # no nonces.json: the run before crashed
    with pytest.raises(AuthError, match="signed before this gateway started"):
        _take(auth, int(time.time()), "nonce-same-second-1")


@pytest.mark.parametrize("stale", [{"partners": {}}, "an earlier run's"])
def test_a_nonces_file_of_another_run_is_not_taken_back(data_dir: Path,
                                                        stale: object) -> None:
    """A copy put back after a crash (or one that claims a clean stop without a run) is
    not the last run's: what the crash left unknown stays refused."""
    first = _start(data_dir)
    first.signed_after, first.signed_after_by_partner = 0.0, {}  # as a run with no crash
    save_nonces(first, data_dir)  # its clean stop
    earlier = json.loads((data_dir / NONCES_FILE).read_text())
    _start(data_dir)  # takes it back and removes it; then a crash (nothing saved)
    (data_dir / NONCES_FILE).write_text(json.dumps(earlier if isinstance(stale, str)
                                                   else stale))
    auth = _start(data_dir)
    with pytest.raises(AuthError, match="signed before this gateway started"):
        _take(auth, int(time.time()) - 5, "nonce-before-crash-1")


@pytest.mark.parametrize("marks", ["garbage", '{"run": "x", "partners": {"acme": "17"}}',
                                   None])
def test_unreadable_marks_after_a_crash_refuse_up_to_the_window(data_dir: Path,
                                                                marks: str | None) -> None:
    _start(data_dir)
    if marks is None:
        (data_dir / MARKS_FILE).unlink()
    else:
        (data_dir / MARKS_FILE).write_text(marks)
    auth = _start(data_dir)  # after a crash, the marks unknown
    with pytest.raises(AuthError, match="clock ahead"):
        _take(auth, int(time.time()) + 200, "nonce-ahead-unknown")
    beyond = int(time.time() + auth.window_s) + MARK_AHEAD_S + 2
    assert auth.signed_after_by_partner["acme"] < beyond


def test_a_mark_beyond_any_signature_is_capped(data_dir: Path) -> None:
    _start(data_dir)
    run = json.loads((data_dir / MARKS_FILE).read_text())["run"]
    (data_dir / MARKS_FILE).write_text(json.dumps({"run": run, "partners": {"acme": 10**20}}))
    auth = _start(data_dir)
    assert auth.signed_after_by_partner["acme"] <= int(time.time() + auth.window_s) + \
        MARK_AHEAD_S


def test_a_mark_that_cannot_be_written_refuses_its_signature(tmp_path: Path) -> None:
    (tmp_path / "acme.secret").write_bytes(SECRET)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    auth = _start(data_dir)  # a first start: no limits
    (data_dir / MARKS_FILE).unlink()
    (data_dir / MARKS_FILE).mkdir()  # no file can replace it now
    with pytest.raises(OverflowError, match="mark"):
        _take(auth, int(time.time()) + 30, "nonce-ahead-unmarked")
    assert "acme" not in auth.marked
