"""Test vectors of ``tests/data/srmp-vectors.txt`` (copied from the spec's examples).

``verbatim(name)`` is the printed text; ``wire(name)`` turns a printed request into the bytes a
sender would put on the wire, undoing only the rendering artefacts the file lists (a wrapped
Content-Type header, LF line ends); it does *not* fix the spec's wrong envelope lengths or the
defective V03 body. ``derived(name)`` is a byte-exact D vector.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

from tests.helpers import REPO_ROOT

TEXT = (REPO_ROOT / "tests" / "data" / "srmp-vectors.txt").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def to_bytes(self) -> bytes:
        head = [f"{self.method} {self.path} HTTP/1.1"] + [f"{k}: {v}"
                                                          for k, v in self.headers.items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + self.body


def verbatim(name: str) -> str:
    match = re.search(rf"^{name}  .*?\n-{{20,}}\n(.*?)\n-{{20,}} END {name}$", TEXT, re.S | re.M)
    assert match, name
    return match.group(1)


def split_request(raw: bytes) -> Request:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return Request(method, path, headers, body)


def wire(name: str) -> Request:
    lines = verbatim(name).split("\n")
    method, path, _ = lines[0].split(" ")
    headers: dict[str, str] = {}
    i = 1
    while i < len(lines) and lines[i] and not lines[i].startswith("--"):
        if ":" not in lines[i]:  # the wrapped "type=text/xml" continuation
            last = list(headers)[-1]
            headers[last] += " " + lines[i].strip()
        else:
            key, value = lines[i].split(": ", 1)
            headers[key] = value
        i += 1
    if i < len(lines) and not lines[i]:
        i += 1
    body = "\r\n".join(lines[i:]).encode("utf-8")
    if headers.get("Content-Type", "").startswith("multipart"):
        body += b"\r\n"
    return Request(method, path, headers, body)


def derived(name: str) -> bytes:
    match = re.search(rf"^### {name} .*?length=(\d+) sha256=(\w+)\n(.*?)\n\n", TEXT, re.S | re.M)
    assert match, name
    raw = base64.b64decode("".join(match.group(3).split()))
    assert len(raw) == int(match.group(1))
    assert hashlib.sha256(raw).hexdigest() == match.group(2)
    return raw


def mutate(seed: bytes, at: int, data: bytes, how: str) -> bytes:
    """``seed`` with ``data`` written over it, put in, or (its length) cut out at ``at``."""
    if how == "replace":
        return seed[:at] + data + seed[at + len(data):]
    if how == "insert":
        return seed[:at] + data + seed[at:]
    return seed[:at] + seed[at + len(data):]
