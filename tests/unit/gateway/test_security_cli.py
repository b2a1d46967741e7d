"""``entrepot auth hash-key``: the key from its argument, from standard input when that is
not a terminal, or made at random on a terminal; never an empty one."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT


def _hash_key(*args: str, stdin: bytes | int = b"") -> subprocess.CompletedProcess[bytes]:
    options: dict[str, object] = ({"input": stdin} if isinstance(stdin, bytes)
                                  else {"stdin": stdin})
    return subprocess.run([sys.executable, "-m", "gateway", "auth", "hash-key", *args],
                          capture_output=True, cwd=REPO_ROOT, timeout=120, check=False,
                          **options)  # type: ignore[call-overload]


def _digest(key: bytes) -> bytes:
    return b"sha256  " + hashlib.sha256(key).hexdigest().encode() + b"\n"


def test_the_key_comes_from_the_argument_or_from_standard_input() -> None:
    assert _hash_key("a long random key").stdout == _digest(b"a long random key")
    piped = _hash_key(stdin=b"piped key\n")  # as `echo` sends it: the newline is not in it
    assert (piped.returncode, piped.stdout) == (0, _digest(b"piped key"))
    assert _hash_key(stdin=b"piped key\r\n").stdout == _digest(b"piped key")


def test_an_empty_key_is_refused() -> None:
    for args, stdin in (([""], b""), (["   "], b""), ([], b""), ([], b"\n")):
        done = _hash_key(*args, stdin=stdin)
        assert done.returncode == 2 and done.stdout == b"", (args, stdin, done)
        assert b"empty" in done.stderr



def test_a_key_no_header_can_carry_is_refused() -> None:
    for key, why in ((" key ", b"spaces at an end"), ("key\t", b"spaces at an end"),
                     ("k\udcff", b"not UTF-8")):  # the bytes b"k\xff" as an argument
        done = _hash_key(key)
        assert done.returncode == 2 and why in done.stderr and b"Traceback" not in (
            done.stderr), (key, done)


def test_on_a_terminal_without_a_key_one_is_made() -> None:
    leader, follower = os.openpty()
    try:
        done = _hash_key(stdin=follower)
    finally:
        os.close(leader)
        os.close(follower)
    key_line, digest_line = done.stdout.splitlines()
    key = key_line.removeprefix(b"key     ")
    assert len(key) >= 40 and digest_line + b"\n" == _digest(key)


def test_certs_create_does_not_replace_a_key_without_force(tmp_path: Path) -> None:
    def create(*extra: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "gateway", "certs", "create", "--out",
                               str(tmp_path), *extra], capture_output=True, cwd=REPO_ROOT,
                              timeout=120, check=False)

    assert create().returncode == 0
    key = tmp_path / "key.pem"
    first = key.read_bytes()
    again = create()
    assert again.returncode == 2 and b"exists" in again.stderr, again.stderr
    assert key.read_bytes() == first
    assert create("--force").returncode == 0
    assert key.read_bytes() != first
