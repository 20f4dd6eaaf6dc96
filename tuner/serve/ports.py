"""Ports for servers: is one held (by anyone, on any address), a free one no other slot or outgoing
connection will take first, and who really listens on one (a server's own socket, or a stranger's)."""

from __future__ import annotations

import os
import random
import socket
import threading
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from .procgroup import _read

# Held while a probe socket is bound, and by whoever starts a process (process.ServerProcess.start): a
# child forked in another thread while a probe is bound holds a copy of it until it execs, and the
# probe's port then reads as in use to the slot that just chose it (a spurious PORT_IN_USE).
PROBE_LOCK = threading.Lock()


def port_in_use(port: int, host: str = "0.0.0.0") -> bool:
    """True if anything holds the port. The wildcard address clashes with a holder on any address,
    and there is deliberately no SO_REUSEADDR/SO_REUSEPORT: vLLM binds with both long before it
    listens, and a cooperative bind would succeed right next to it."""
    with PROBE_LOCK, socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


_HANDED_OUT: deque[int] = deque(maxlen=256)  # recent answers: parallel slots never share a port
_HANDED_LOCK = threading.Lock()


def find_free_port(host: str = "127.0.0.1") -> int:
    """A port free right now on every address, never one handed out recently by this process (two
    slots could otherwise get the same one before either server binds it), and below the kernel's
    ephemeral range: a port the kernel picks for bind(0) is also the kind it gives every outgoing
    connection, and on a node busy with load tests one of those could take it before the server binds.
    Still racy against other programs that bind it by number: PORT_IN_USE covers that loss."""
    low, high = _quiet_port_range()
    rng = random.SystemRandom()
    with _HANDED_LOCK:
        for attempt in range(200):
            if attempt < 150 and high > low:
                port = rng.randint(low, high)
            else:  # the range is crowded or there is none: whatever the kernel hands out
                with PROBE_LOCK, socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind((host, 0))
                    port = s.getsockname()[1]
            if port not in _HANDED_OUT and not port_in_use(port):
                _HANDED_OUT.append(port)
                return port
    raise OSError("no free port found")


def _quiet_port_range() -> tuple[int, int]:
    """Ports no one gets by chance: from 10000 up to below the ephemeral range (Linux's
    ip_local_port_range, 32768 by default). (0, 0) when that leaves too few."""
    low = 32768
    with suppress(OSError, ValueError, IndexError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return (10000, low - 1) if low - 1 - 10000 >= 1000 else (0, 0)


def _foreign_listeners(port: int, pids: Callable[[], list[int]]) -> int:
    """How many sockets listen on `port` (in our network namespace) that none of `pids()` holds.
    Two looks, counting what both find foreign: a server that exits between the two reads of one
    look (the socket table, then its own descriptors) has its own socket read as another's."""
    foreign = _listening(port) - _sockets_of(pids())
    if foreign:
        foreign &= _listening(port) - _sockets_of(pids())
    return len(foreign)


def _listening(port: int) -> set[str]:
    """Inodes of the sockets listening on `port`."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in (_read(table) or b"").decode().splitlines()[1:]:
            cols = row.split()  # sl local_address rem_address st ... inode; st 0A = LISTEN
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def _sockets_of(pids: list[int]) -> set[str]:
    """Inodes of the sockets these processes hold open."""
    inodes = set()
    for pid in pids:
        with suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with suppress(OSError):
                    if (link := os.readlink(f"/proc/{pid}/fd/{fd}")).startswith("socket:["):
                        inodes.add(link[8:-1])
    return inodes
