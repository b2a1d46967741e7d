"""``entrepot auth hash-key``: the key from its argument, from standard input when that is
not a terminal, or made at random on a terminal; never an empty one."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

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
