"""The live clock that drives an Engine behind the simulator's HTTP server (asyncio, time-scaled).

A step of d simulated seconds is slept off as d x time_scale wall seconds, scheduled on absolute
deadlines so rounding never accumulates. The virtual clock (no sleeping) is the model's own:
tuner/perfmodel/serving.py run_virtual; both see the same steps, so a virtual run predicts a live one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from ..perfmodel.engine import Engine, SimRequest, StepResult


@dataclass
class LiveRequest:
    rid: str
    sim: SimRequest
    events: asyncio.Queue  # ("token", index, sim_time) ... ("done", n, sim_time) | ("abort"/"error", msg, t)


class LiveDriver:
    """Steps an Engine in (scaled) real time; requests stream their tokens through asyncio queues."""

    def __init__(self, engine: Engine, time_scale: float, sim_start: float = 0.0,
                 on_step: Callable[[StepResult, float, float], None] | None = None,
                 on_logs: Callable[[list], None] | None = None):
        self.engine = engine
        self.scale = time_scale
        self.sim_t = sim_start
        self._origin = (None, sim_start)  # (loop time, simulated time) pinned at start()
        self.on_step = on_step  # (result, sim_start, sim_end) once the step is over: metrics, faults
        self.on_logs = on_logs  # the step's log records, as it starts (a compile stall is logged first)
        self.requests: dict[str, LiveRequest] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task | None = None

    def now(self) -> float:
        wall0, sim0 = self._origin
        loop = asyncio.get_running_loop()
        return sim0 if wall0 is None else sim0 + (loop.time() - wall0) / self.scale

    def start(self) -> None:
        self._origin = (asyncio.get_running_loop().time(), self.sim_t)
        self._task = asyncio.create_task(self._run())

    def submit(self, rid: str, prompt_len: int, max_tokens: int, images: tuple = (),
               block_hashes: tuple = ()) -> LiveRequest:
        req = LiveRequest(rid, SimRequest(rid, prompt_len, max_tokens, self.now(), images=tuple(images),
                                          block_hashes=block_hashes), asyncio.Queue())
        self.requests[rid] = req
        self.engine.add_request(req.sim)
        self._wake.set()
        return req

    def cancel(self, rid: str) -> None:
        if self.requests.pop(rid, None) is not None:
            self.engine.abort(rid)

    async def stop(self) -> None:
        """Abort every request (their streams end) and stop stepping."""
        self._stopping = True
        self._wake.set()
        for req in list(self.requests.values()):
            req.events.put_nowait(("abort", "server shutting down", self.now()))
            self.engine.abort(req.rid)
        self.requests.clear()
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            if not self.engine.has_work():
                self._wake.clear()
                await self._wake.wait()
                self.sim_t = max(self.sim_t, self.now())
                continue
            start = self.sim_t
            res = self.engine.step(start)
            end = start + res.duration
            if res.logs and self.on_logs:
                self.on_logs(res.logs)
            wall0, sim0 = self._origin
            delay = wall0 + (end - sim0) * self.scale - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            # Simulated time follows the engine, not the wall: a late wake-up (event-loop jitter, large at
            # small time scales) is caught up by the next deadlines instead of stretching the timeline.
            self.sim_t = end
            if self.on_step:
                self.on_step(res, start, self.sim_t)
            for r in res.emitted:
                live = self.requests.get(r.rid)
                if live:
                    live.events.put_nowait(("token", r.generated, self.sim_t))
            for r in res.finished:
                live = self.requests.pop(r.rid, None)
                if live:
                    live.events.put_nowait(("error", r.error, self.sim_t) if r.error
                                           else ("done", r.generated, self.sim_t))
