"""A fake `vllm serve` for tests/test_server.py: boots, "warms up", serves GET /health, and can
misbehave on request (fail at boot, crash after ready, ignore signals, spawn a process tree,
escape the group). Run with sys.executable; stdlib only.

Log lines carry vLLM-like prefixes; the warmup starts with "Warming up model" and every child
prints "child pid=N role=R" so tests can find the whole tree.
"""
import argparse
import http.server
import os
import signal
import socket
import subprocess
import sys
import time


def say(role, msg):
    # One write per line: print() may write the text and its newline separately, and four
    # processes share this stdout, so lines could otherwise run into each other.
    os.write(1, f"({role} pid={os.getpid()}) INFO fake: {msg}\n".encode())


def sleep_forever(role):
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        say(role, "got SIGINT, exiting")
        sys.exit(0)


def spawn(args, role, *, new_session=False, grandchild=False):
    argv = [sys.executable, os.path.abspath(__file__), "--role", role, "--tag", args.tag]
    argv += ["--ignore-sigint"] * args.ignore_sigint + ["--ignore-sigterm"] * args.ignore_sigterm
    argv += ["--grandchild"] * grandchild
    return subprocess.Popen(argv, start_new_session=new_session)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 200 if self.path in ("/health", "/v1/models") else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, fmt, *a):  # uvicorn-like access line on stdout
        print("INFO:     " + fmt % a, flush=True)


def vllm_like_socket(host, port):
    # Exactly what vLLM's create_server_socket does: bind early, listen later, share the port.
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, port))
    return s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--role", default="APIServer")  # APIServer | EngineCore | Worker | Escaped
    p.add_argument("--tag", default="")             # lets a test find every process it caused
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--boot-s", type=float, default=0.1)
    p.add_argument("--warmup-s", type=float, default=0.1)
    p.add_argument("--exit-code-at-boot", type=int)
    p.add_argument("--crash-after-ready-s", type=float)
    p.add_argument("--crash-exit-code", type=int, default=3)
    p.add_argument("--ignore-sigint", action="store_true")
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--spawn-children", type=int, default=0)
    p.add_argument("--grandchild", action="store_true")  # 1st child spawns one, like the Worker
    p.add_argument("--setsid-child", action="store_true")
    p.add_argument("--print-port-in-use", action="store_true")  # log it, then hang on
    p.add_argument("--print-oom", action="store_true")          # during warmup, then exit 1
    p.add_argument("--bind-early", action="store_true")         # vLLM-style socket (see above)
    p.add_argument("--api-key")
    args = p.parse_args()

    if args.ignore_sigint:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    if args.role != "APIServer":
        kids = [spawn(args, "Worker")] if args.role == "EngineCore" and args.grandchild else []
        say(args.role, f"child pid={os.getpid()} role={args.role}")
        del kids
        sleep_forever(args.role)

    given = {"port": args.port, **({"api_key": [args.api_key]} if args.api_key else {})}
    say("APIServer", f"non-default args: {given}")  # older vLLM printed --api-key's value (0.32 masks it)
    sock = None
    if args.bind_early:
        try:
            sock = vllm_like_socket(args.host, args.port)
        except OSError as e:
            print(f"OSError: {e}", flush=True)  # "[Errno 98] Address already in use"
            sys.exit(1)
    children = [spawn(args, "EngineCore", grandchild=args.grandchild and i == 0)
                for i in range(args.spawn_children)]  # never reaped: like a dying vLLM
    if args.setsid_child:
        children.append(spawn(args, "Escaped", new_session=True))
    if args.print_port_in_use:
        print(f"ERROR [Errno 98] error while attempting to bind on address "
              f"('{args.host}', {args.port}): address already in use", flush=True)
        sleep_forever("APIServer")
    time.sleep(args.boot_s)
    if args.exit_code_at_boot is not None:
        say("EngineCore", "RuntimeError: Engine core initialization failed")
        sys.exit(args.exit_code_at_boot)

    say("Worker", "Warming up model for the compilation...")
    steps = 5
    for i in range(steps):
        time.sleep(args.warmup_s / steps)
        say("Worker", f"[Warmup][Prompt][{i + 1}/{steps}] batch_size:1 seq_len:128")
        if args.print_oom:
            say("Worker", "RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation "
                          "failed for size::1073741824 (1024)MB - out of memory")
            sys.exit(1)
    say("Worker", "Warming up done.")

    server = http.server.ThreadingHTTPServer((args.host, args.port), Health,
                                             bind_and_activate=sock is None)
    if sock is not None:
        server.socket.close()
        server.socket = sock
        server.server_activate()  # listen() only now, like uvicorn after the engine is up
    server.daemon_threads = True
    say("APIServer", f"Starting vLLM server on http://{args.host}:{server.server_address[1]}")
    print("INFO:     Application startup complete.", flush=True)
    if args.crash_after_ready_s is not None:
        def crash(*_):
            say("APIServer", "EngineDeadError: engine died")
            os._exit(args.crash_exit_code)
        signal.signal(signal.SIGALRM, crash)
        signal.setitimer(signal.ITIMER_REAL, args.crash_after_ready_s)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        say("APIServer", "[shutdown] API server: shutdown triggered")
        sys.exit(0)


if __name__ == "__main__":
    main()
