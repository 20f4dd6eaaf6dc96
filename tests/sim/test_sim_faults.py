"""Every --sim-fault mode, and what a client (or a launcher) sees of it."""

from __future__ import annotations

import asyncio
import re
import signal
import time

from .test_sim_server import CAL_ARGS, CAL_ENV, MODEL, SimProcess, group_members, stream_completion

PROMPT = list(range(5, 105))


def ask(srv, n=1, max_tokens=8, timeout=30.0):
    async def go():
        return await asyncio.gather(*(stream_completion(srv.base, PROMPT, max_tokens, MODEL, timeout)
                                      for _ in range(n)))
    return asyncio.run(go())


def never_ready(srv, seconds=1.5):
    """Polls /health for a while: None (refused) every time, as a launcher would see it."""
    deadline = time.monotonic() + seconds
    seen = set()
    while time.monotonic() < deadline and srv.proc.poll() is None:
        seen.add(srv.health())
        time.sleep(0.05)
    return seen


def test_crash_during_warmup():
    with SimProcess(CAL_ARGS, CAL_ENV, extra=["--sim-fault", "crash-warmup:at=0.3"]) as srv:
        seen = never_ready(srv, 5)
        rc = srv.proc.wait(10)
        last = srv.log().strip().splitlines()[-1]
    print(f"\ncrash-warmup: /health answers {seen}, exit {rc}, last line: {last}")
    assert 200 not in seen and rc == 1 and "Graph compile failed" in last


def test_hang_during_warmup_ignores_sigint_until_sigterm():
    srv = SimProcess(CAL_ARGS, CAL_ENV, extra=["--sim-fault", "hang-warmup:at=0.2"])
    seen = never_ready(srv, 1.5)
    deadline = time.monotonic() + 30  # a loaded machine may need longer than 1.5 s to reach the hang
    while "[Warmup]" not in srv.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)  # into the hang: the warm-up lines have stopped
    log = srv.log()
    srv.proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    alive_after_sigint = srv.proc.poll() is None
    rc = srv.stop(sig=signal.SIGTERM)
    print(f"\nhang-warmup: /health {seen}, {log.count('[Warmup]')} warmup lines then silence, "
          f"alive after SIGINT: {alive_after_sigint}, exit after SIGTERM {rc}")
    assert 200 not in seen and "Warmup finished" not in log and "[Warmup]" in log
    assert alive_after_sigint and rc == -signal.SIGTERM and group_members(srv.pgid) == []


def test_oom_during_warmup():
    with SimProcess(CAL_ARGS, CAL_ENV, extra=["--sim-fault", "oom-warmup"]) as srv:
        rc = srv.proc.wait(10)
        log = srv.log()
    print(f"\noom-warmup: exit {rc}, {log.strip().splitlines()[-1]}")
    assert rc == 1 and re.search(r"MODULE:PT_DEVMEM Allocation failed for size::\d+", log)


def test_crash_under_load_cuts_open_streams():
    with SimProcess(CAL_ARGS, CAL_ENV, scale=1.0, extra=["--sim-startup-time-scale", "0.01",
                                                          "--sim-fault", "crash-load:after=20"]) as srv:
        srv.wait_ready()
        results = ask(srv, n=2, max_tokens=200)
        rc = srv.proc.wait(10)
    print(f"\ncrash-load: exit {rc}; clients got {[len(r['chunks']) for r in results]} of 200 tokens, "
          f"errors {[r['error'] for r in results]}, [DONE] {[r['done'] for r in results]}")
    assert rc == 1
    assert all(not r["done"] and len(r["chunks"]) < 200 and r["error"] for r in results)


def test_http_500_on_every_other_request():
    with SimProcess(CAL_ARGS, CAL_ENV, extra=["--sim-fault", "http-500:every=2"]) as srv:
        srv.wait_ready()
        results = [ask(srv)[0] for _ in range(4)]
    print(f"\nhttp-500: statuses {[r['status'] for r in results]}, body {results[1].get('body')}")
    assert [r["status"] for r in results] == [200, 500, 200, 500]
    assert results[1]["body"]["object"] == "error" and results[1]["body"]["code"] == 500


def test_malformed_sse_chunk():
    with SimProcess(CAL_ARGS, CAL_ENV, extra=["--sim-fault", "malformed-sse:every=1"]) as srv:
        srv.wait_ready()
        r = ask(srv, max_tokens=5)[0]
    print(f"\nmalformed-sse: {len(r['bad'])} undecodable chunk(s), e.g. {r['bad'][0][:60]!r}...; "
          f"{len(r['chunks'])} good chunks, usage {r['usage']}")
    assert len(r["bad"]) == 1 and len(r["chunks"]) == 4 and r["done"]


def test_stalled_stream_until_the_client_gives_up():
    with SimProcess(CAL_ARGS, CAL_ENV, extra=["--sim-fault", "stall-stream:every=1,after=2"]) as srv:
        srv.wait_ready()
        t0 = time.monotonic()
        r = ask(srv, max_tokens=50, timeout=1.5)[0]
        waited = time.monotonic() - t0
        rc = srv.stop()
    print(f"\nstall-stream: {len(r['chunks'])} tokens then nothing; client {r['error']} after {waited:.1f} s; "
          f"server exit {rc} on SIGINT")
    assert len(r["chunks"]) == 2 and not r["done"] and r["error"] == "TimeoutError" and rc == 0


def test_slow_start():
    with SimProcess(CAL_ARGS, CAL_ENV, scale=0.002, extra=["--sim-fault", "slow-start:factor=20"]) as srv:
        srv.wait_ready(60)
        log = srv.log().splitlines()
    stamp = lambda l: sum(int(x) * f for x, f in zip(l.split()[2].split(":"), (3600, 60, 1)))
    # modulo a day: a log that starts before midnight and loads after it
    load = (stamp(next(l for l in log if "Loading model weights took" in l)) - stamp(log[0])) % 86400
    print(f"\nslow-start: weights loaded {load} simulated seconds after start (normally ~8)")
    assert load > 100


def test_refuse_bind():
    with SimProcess(CAL_ARGS, CAL_ENV, extra=["--sim-fault", "refuse-bind"]) as srv:
        rc = srv.proc.wait(20)
        log = srv.log()
        print(f"\nrefuse-bind: exit {rc}: {log.strip().splitlines()[-2]}")
        assert rc == 1 and "Address already in use" in log and srv.health() is None


def test_fault_from_the_environment():
    """BUCKET_TUNER_SIM_FAULT switches faults like any other server setting ("none": no fault)."""
    with SimProcess(CAL_ARGS, {**CAL_ENV, "BUCKET_TUNER_SIM_FAULT": "oom-warmup"}) as srv:
        assert srv.proc.wait(10) == 1 and "MODULE:PT_DEVMEM" in srv.log()
    with SimProcess(CAL_ARGS, {**CAL_ENV, "BUCKET_TUNER_SIM_FAULT": "none"}) as srv:
        srv.wait_ready()
