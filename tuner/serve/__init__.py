"""How a server lives and dies: what to start, its process group, its guard, and what it may not leak.

    backends   the command line of a server (a genuine `vllm serve` or the simulator), nothing else
    process    start, watch and stop one server for one trial (ServerProcess), readiness, outcomes
    ports      a free port no other slot takes first; who really listens on one
    procgroup  a server's process group as /proc shows it; stopping it with escalation
    watchdog   the guard process beside each server: no server outlives its tuner
    redact     secret-looking values redacted before anything is logged or stored (or printed by the server)
"""
