"""The shell examples of README.md and docs/rest-api.md, run as written against a real
``entrepot serve``: every ``curl`` in them must succeed (``--fail-with-body``)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT, GatewayProcess, http_get

# Run again in one process (server.workers = 1) by make test (ENTREPOT_TEST_WORKERS).
pytestmark = pytest.mark.workers

# Each curl of an example fails the script on an error answer; the rest is the example's own.
_PRELUDE = """set -euo pipefail
curl() { command curl -sS --fail-with-body "$@"; echo; }
"""


def _blocks(doc: Path, start: str, end: str) -> list[str]:
    """The fenced code blocks of ``doc`` between the text ``start`` and the text ``end``."""
    text = doc.read_text()
    begin = text.index(start)
    section = text[begin:text.index(end, begin)]
    return re.findall(r"^```[a-z]*\n(.*?)^```", section, flags=re.DOTALL | re.MULTILINE)


def _run(gateway: GatewayProcess, blocks: list[str]) -> str:
    assert blocks
    script = _PRELUDE + f"G={gateway.url}\n" + "\n".join(blocks)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, (done.stdout, done.stderr, script)
    return done.stdout


def _messages(gateway: GatewayProcess) -> dict[str, int]:
    status, _, body = http_get(gateway.url + "/v1/queues")
    assert status == 200
    return {q["path"]: q["messages"] for q in json.loads(body)["queues"]}


def test_the_walkthrough_and_the_safe_receive_work_as_written(gateway: GatewayProcess) -> None:
    _run(gateway, _blocks(REPO_ROOT / "README.md", "**Create queues**",
                          "**One SRMP message**"))
    assert _messages(gateway)["private$/payments"] == 1  # the receipt the walkthrough sent
    out = _run(gateway, _blocks(REPO_ROOT / "docs" / "rest-api.md",
                                "**Receiving is destructive.**", "\n## "))
    assert "cmVjZWlwdCBmb3IgNDI=" in out  # "receipt for 42", received in the transaction
    assert _messages(gateway)["private$/payments"] == 0  # and removed by its commit


def test_the_srmp_example_is_stored_once_however_often_it_is_posted(tmp_path: Path) -> None:
    """README's SRMP message, posted twice as written (with the `names` entry it gives): the
    second post is a duplicate, answered 200 and not stored, so its receive finds nothing."""
    config, post = _blocks(REPO_ROOT / "README.md", "**One SRMP message**", "## Commands")[:2]
    toml = re.search(r"cat > local.toml <<'EOF'\n(.*?)^EOF", config, re.DOTALL | re.MULTILINE)
    assert toml is not None
    (tmp_path / "local.toml").write_text(toml.group(1))
    gateway = GatewayProcess(tmp_path / "data",
                             env={"ENTREPOT_CONFIG": str(tmp_path / "local.toml")})
    try:
        gateway.wait_ready()
        subprocess.run(["curl", "-sS", "--fail-with-body", "-X", "PUT",
                        f"{gateway.url}/v1/queues/orders", "-d", "{}"], check=True,
                       capture_output=True, timeout=60)
        script = _PRELUDE + post.replace("http://127.0.0.1:8080", gateway.url)
        outs = [subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                               timeout=120, cwd=tmp_path) for _ in range(2)]
        for done in outs:
            assert done.returncode == 0, (done.stdout, done.stderr)
        first, second = (json.loads(done.stdout.strip().splitlines()[-1]) for done in outs)
        assert [m["label"] for m in first["messages"]] == ["hello"]
        assert second["messages"] == [], "the second post was stored again"
        assert _messages(gateway)["orders"] == 0
    finally:
        gateway.stop()


def test_the_signed_request_example_is_accepted_and_a_tampered_one_is_not(
        tmp_path: Path) -> None:
    """docs/security.md's EP-HMAC-SHA256 client, run as written (its gateway address
    replaced) against a gateway where acme has an HMAC secret: the send is stored. The same
    script with the label changed after signing is refused (401), so the example proves
    the signature covers what the section says."""
    [example] = _blocks(REPO_ROOT / "docs" / "security.md", "## Signed requests",
                        "## Addresses")[1:]
    (tmp_path / "acme.secret").write_text("a shared secret of acme, 42 bytes long...\n")
    (tmp_path / "local.toml").write_text(
        '[[queues]]\npath = "private$/orders_in"\n'
        '[auth]\nadmin_key_sha256 = "'
        + hashlib.sha256(b"admin-key-of-the-docs-test").hexdigest() + '"\n'
        '[[partners]]\nname = "acme"\nhmac_secret_file = "'
        + str(tmp_path / "acme.secret") + '"\nsend = ["private$/orders_in"]\n')
    gateway = GatewayProcess(tmp_path / "data",
                             env={"ENTREPOT_CONFIG": str(tmp_path / "local.toml")})
    try:
        gateway.wait_ready()
        script = example.replace("https://gateway.example:8443", gateway.url)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert json.loads(done.stdout)["queue"] == "private$/orders_in"
        tampered = script.replace(
            "    return urllib.request.Request(",
            '    headers["Mq-Label"] = "order 43"\n    return urllib.request.Request(')
        assert tampered != script
        refused = subprocess.run([sys.executable, "-c", tampered], capture_output=True,
                                 text=True, timeout=120, cwd=tmp_path)
        assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr
        request = urllib.request.Request(
            gateway.url + "/v1/queues/private$/orders_in/messages",
            headers={"Authorization": "Bearer admin-key-of-the-docs-test"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            stored = json.loads(answer.read())["messages"]
        assert [(m["label"], m["content_type"]) for m in stored] == [
            ("order 42", "application/json")]
    finally:
        gateway.stop()

