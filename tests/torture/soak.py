"""Soak: the gateway at half its measured maximum rate for a long time (30 minutes in
``make torture``), a receiver draining what the senders send. Every few seconds the
gateway's RSS and the window's send p99 are sampled; both must stay flat, and a PNG of them
over time is written next to the JSON report."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from tests.helpers import GatewayProcess

QUEUE = "private$/t_soak"
_SENDERS = 16


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _max_rate(url: str, seconds: float) -> float:
    """Closed loop, 16 senders: messages per second."""
    done = 0
    deadline = time.monotonic() + seconds

    async def sender(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.monotonic() < deadline:
            async with session.post(f"{url}/v1/queues/{QUEUE}/messages",
                                    data=b"m" * 1024) as response:
                assert response.status == 201
                done += 1

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(sender(session) for _ in range(_SENDERS)))
        async with session.post(f"{url}/v1/queues/{QUEUE}/purge") as response:
            assert response.status == 200
    return done / seconds


async def _soak(url: str, pid: int, rate: float, seconds: float, sample_s: float
                ) -> list[dict[str, float]]:
    samples: list[dict[str, float]] = []
    latencies: list[float] = []
    received = 0
    stop = asyncio.Event()
    interval = _SENDERS / rate  # each sender's pace

    async def sender(session: aiohttp.ClientSession, offset: float) -> None:
        next_at = time.monotonic() + offset
        while not stop.is_set():
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            started = time.monotonic()
            async with session.post(f"{url}/v1/queues/{QUEUE}/messages",
                                    data=b"s" * 1024) as response:
                assert response.status == 201, await response.text()
            latencies.append(time.monotonic() - started)
            next_at += interval

    async def receiver(session: aiohttp.ClientSession) -> None:
        nonlocal received
        while not stop.is_set():
            async with session.post(f"{url}/v1/queues/{QUEUE}/receive",
                                    params={"max": "100", "wait": "0.5"}) as response:
                assert response.status == 200, await response.text()
                received += len((await response.json())["messages"])

    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(sender(session, i * interval / _SENDERS))
                 for i in range(_SENDERS)]
        tasks += [asyncio.create_task(receiver(session)) for _ in range(2)]
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            # Senders and receivers run until ``stop``: one that ended has failed.
            ended, _ = await asyncio.wait(tasks, timeout=sample_s,
                                          return_when=asyncio.FIRST_COMPLETED)
            if ended:
                break
            window, latencies[:] = sorted(latencies), []
            p99 = window[int(len(window) * 0.99)] if window else 0.0
            samples.append({"t_s": round(time.monotonic() - started, 1),
                            "rss_mib": round(_rss_kib(pid) / 1024, 1),
                            "p99_ms": round(p99 * 1000, 2), "sent": len(window)})
        stop.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    if failures:  # a sender's or receiver's assert: the first one, with its traceback
        raise failures[0]
    sent = sum(s["sent"] for s in samples)
    assert sent > 0 and received > 0, f"{sent} sent, {received} received"
    return samples


def _plot(samples: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    times = [s["t_s"] / 60 for s in samples]
    top.plot(times, [s["rss_mib"] for s in samples])
    top.set_ylabel("gateway RSS (MiB)")
    top.set_ylim(bottom=0)
    bottom.plot(times, [s["p99_ms"] for s in samples], color="tab:red")
    bottom.set_ylabel("send p99 (ms)")
    bottom.set_xlabel("minutes")
    bottom.set_ylim(bottom=0)
    top.set_title("soak at half the measured maximum rate")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def run(data_dir: Path, seconds: float, png: Path, sample_s: float = 5.0,
        check_latency: bool = True) -> dict[str, Any]:
    """``check_latency``: also require the p99 of the last quarter within 3x the first's
    (off for short runs on a shared machine, where one noisy neighbour decides it)."""
    gateway = GatewayProcess(data_dir)
    gateway.wait_ready()
    try:
        import urllib.request
        urllib.request.urlopen(urllib.request.Request(f"{gateway.url}/v1/queues/{QUEUE}",
                                                      data=b"{}", method="PUT"), timeout=10)
        maximum = asyncio.run(_max_rate(gateway.url, min(10.0, max(3.0, seconds / 10))))
        samples = asyncio.run(_soak(gateway.url, gateway.proc.pid, maximum / 2, seconds,
                                    sample_s))
    finally:
        gateway.stop()
    _plot(samples, png)
    settled = samples[len(samples) // 4:] or samples  # after the warm-up quarter
    rss = [s["rss_mib"] for s in settled]
    p99 = [s["p99_ms"] for s in settled]
    report = {"scenario": "soak", "seconds": seconds, "max_rate": round(maximum),
              "rate": round(maximum / 2), "samples": len(samples),
              "rss_mib_first": rss[0], "rss_mib_last": rss[-1], "rss_mib_max": max(rss),
              "p99_ms_median": statistics.median(p99), "p99_ms_max": max(p99),
              "png": str(png), "series": samples}
    assert max(rss) - rss[0] < 64, f"RSS grew {rss[0]} -> {max(rss)} MiB"
    if check_latency:
        assert statistics.median(p99[-max(1, len(p99) // 4):]) < 3 * max(
            1.0, statistics.median(p99[: max(1, len(p99) // 4)])), "p99 drifted up"
    return report
