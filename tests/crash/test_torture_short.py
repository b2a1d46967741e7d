"""Short runs of the torture scenarios: damaged files, a full disk, fuzzing, abuse, soak."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import GatewayProcess
from tests.torture import abuse, damage, disk_full, fuzz, soak


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_damaged_store_files_are_reported_set_aside_and_the_rest_served(tmp_path: Path
                                                                        ) -> None:
    report = damage.run(tmp_path, rounds=3, seed=8)
    assert report["files_damaged"] == 6 and report["duplicated"] == 0
    assert report["lost"] <= 50 * report["damaged_records_found"], report


@pytest.mark.crash
@pytest.mark.timeout(120)
def test_a_damaged_queue_registration_keeps_its_messages(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "data")
    gateway.wait_ready()
    urllib.request.urlopen(urllib.request.Request(
        f"{gateway.url}/v1/queues/{damage.QUEUE}", data=b"{}", method="PUT"), timeout=10).read()
    acked = damage.fill(gateway.url, 0, 120)
    gateway.stop()
    [registration] = [p for p in (tmp_path / "data" / "storage" / "lqs").iterdir()
                      if damage.QUEUE.encode() in p.read_bytes()]
    registration.write_bytes(registration.read_bytes()[:25])  # torn: the path is cut
    gateway = GatewayProcess(tmp_path / "data", port=gateway.port)
    try:
        gateway.wait_ready()
        served, recovered = damage.served_indexes(gateway.url)
    finally:
        gateway.stop()
    assert recovered == 1 and sorted(served) == acked
    assert "registration lost; its messages are kept as private$/recovered_" in gateway.log()
    quarantined = list((tmp_path / "data" / "storage" / "quarantine").iterdir())
    assert [p.name for p in quarantined] == [f"lqs-{registration.name}"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (the store's "
                    "own ENOSPC tests in tests/fault cover the seam)")
@pytest.mark.timeout(300)
def test_a_full_disk_refuses_with_retry_after_and_recovers_by_itself(tmp_path: Path) -> None:
    report = disk_full.run(tmp_path / "mnt")
    assert report["acknowledged"] > 100 and report["resumed"] >= 10
    assert set(report["refused"]) <= {503, 507} and report["lost"] == 0


@pytest.mark.timeout(300)
def test_fuzzed_requests_never_break_the_gateway(tmp_path: Path) -> None:
    report = fuzz.run(tmp_path / "data", cases=5000)
    assert report["cases"] == 5000 and report["server_errors"] == report["unavailable"] == 0
    # Every mutated mapping file came out parsed or refused (MappingError), and the mutations
    # reached the parser's refusals.
    assert sum(report["mapping"].values()) == 1000 and report["mapping"]["refused"] > 0, report


@pytest.mark.timeout(120)
def test_abusive_clients_do_not_starve_a_normal_one(tmp_path: Path) -> None:
    report = abuse.run(tmp_path / "data", idle=1000, slow=100)
    assert report["normal_max_ms_under_abuse"] < 1000
    assert report["oversized_statuses"] == {"header": 400, "headers_count": 400, "body": 413}


@pytest.mark.timeout(120)
def test_a_short_soak_keeps_memory_flat_and_plots_it(tmp_path: Path) -> None:
    report = soak.run(tmp_path / "data", 12, tmp_path / "soak.png", sample_s=1.2,
                      check_latency=False)
    assert report["samples"] >= 8 and report["rss_mib_max"] - report["rss_mib_first"] < 64
    assert (tmp_path / "soak.png").read_bytes()[:4] == b"\x89PNG"
