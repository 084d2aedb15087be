"""Fail fast on a hung collective: every torch.distributed collective is traced, and one that has not
completed ``timeout`` seconds after it was issued ends this rank at once, naming itself and the collective.

Why our own: NCCL notices a timed-out collective and logs it, but with a rank blocked in a device
synchronisation the processes do not exit (also under ``TORCH_NCCL_ASYNC_ERROR_HANDLING=3``), so a hung
peer held a run until the whole-run watchdog. Here a monitor thread polls what is outstanding:

- a blocking call (gloo, objects, barrier) is outstanding until the Python call returns;
- an NCCL call without ``async_op`` is outstanding until a CUDA event recorded after it on the current
  stream has completed (the stream waits on NCCL's, so the event completes with the collective);
- an ``async_op`` call or a point-to-point batch is outstanding until its ``Work`` objects say completed.

On expiry the monitor prints one line, hands it to ``on_expiry`` (the smoke's rank status file) and
``os._exit``\\ s: torchrun then stops the peers. ``install`` must run before megatron-core is imported:
modules that bound ``from torch.distributed import all_reduce`` at import time would keep the untraced one.
The monitor also publishes how many collectives this rank has issued, so a launcher can name the peer that
stopped issuing them (the hung rank is the one that fell behind, not the one that timed out).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

TRACED = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_object",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "reduce", "broadcast",
    "broadcast_object_list", "all_to_all", "all_to_all_single", "barrier", "send", "recv", "isend", "irecv",
    "batch_isend_irecv", "gather", "scatter", "gather_object", "monitored_barrier",
)
POLL_S = 0.25
"""How often the monitor looks: a hung collective ends the rank within ``timeout + POLL_S``."""


@dataclass
class Pending:
    """One issued collective still in flight."""

    seq: int
    name: str
    group: str
    issued: float
    event: Any = None  # a CUDA event recorded after an NCCL call on the current stream
    works: list[Any] = field(default_factory=list)
    returned: bool = False  # the Python call came back (blocking calls are done then)

    def done(self) -> bool:
        if not self.returned:
            return False
        if self.works:
            return all(w.is_completed() for w in self.works)
        return self.event is None or bool(self.event.query())

    def describe(self, now: float) -> str:
        return f"{self.name} #{self.seq} on {self.group}, issued {now - self.issued:.1f} s ago"


class Tracer:
    """The traced-collective bookkeeping of this process (one per process: ``install`` returns it)."""

    def __init__(self, timeout_s: float, rank: int, on_expiry: Callable[[str, dict[str, Any]], None] | None,
                 publish: Callable[[dict[str, Any]], None] | None) -> None:
        self.timeout_s = timeout_s
        self.rank = rank
        self.on_expiry = on_expiry
        self.publish = publish
        self.lock = threading.Lock()
        self.pending: list[Pending] = []
        self.issued = 0
        self.last = ""
        self.failed: str | None = None  # the collective that raised, described

    def state(self) -> dict[str, Any]:
        """How far this rank got: collectives issued, the last one's name, the oldest one in flight."""
        now = time.monotonic()
        with self.lock:
            oldest = self.pending[0].describe(now) if self.pending else None
            return {"issued": self.issued, "last": self.last, "outstanding": oldest}

    def begin(self, name: str, group: str) -> Pending:
        """A collective ``name`` issued on ``group`` (described: ``ranks [0, 1]``) now."""
        with self.lock:
            self.issued += 1
            self.last = name
            entry = Pending(self.issued, name, group, time.monotonic())
            self.pending.append(entry)
        return entry

    def failed_with(self, entry: Pending, exc: Exception) -> Exception | None:
        """Record that ``entry`` raised (gloo's and NCCL's own timeouts do); the exception renamed to
        name this rank and the collective (None when its type cannot be rebuilt from a message)."""
        with self.lock:
            self.pending = [p for p in self.pending if p is not entry]
            self.failed = entry.describe(time.monotonic())
        return _renamed(exc, f"rank {self.rank}: {entry.name} #{entry.seq} on {entry.group} failed: {exc}")

    def expired(self) -> Pending | None:
        """Drop what has completed; the oldest collective past the timeout, if any."""
        now = time.monotonic()
        with self.lock:
            self.pending = [p for p in self.pending if not _safe_done(p)]
            for entry in self.pending:
                if now - entry.issued > self.timeout_s:
                    return entry
        return None

    def watch(self) -> None:
        last_publish = 0.0
        while True:
            time.sleep(POLL_S)
            stuck = self.expired()
            if stuck is not None:
                self.fire(stuck)
            if self.publish and time.monotonic() - last_publish >= 1.0:
                last_publish = time.monotonic()
                self.publish(self.state())

    def fire(self, stuck: Pending) -> None:
        msg = (f"rank {self.rank}: collective {stuck.describe(time.monotonic())} did not complete within "
               f"the {self.timeout_s:g} s timeout")
        print(f"[collectives] {msg}", flush=True)
        if self.on_expiry:
            try:
                self.on_expiry(msg, {**self.state(), "timed_out": stuck.describe(time.monotonic())})
            finally:
                os._exit(1)
        os._exit(1)


def _safe_done(entry: Pending) -> bool:
    try:
        return entry.done()
    except Exception:  # a broken communicator or CUDA context: the call failed, it is not hung
        return True


def _renamed(exc: Exception, message: str) -> Exception | None:
    """The same kind of exception with a message that names the rank and the collective (None when the
    type cannot be built from a message alone)."""
    try:
        return type(exc)(message)
    except Exception:
        return None


def _group_name(group: Any) -> str:
    """The ranks a collective spans, as the log and the certificate name them."""
    import torch.distributed as dist

    try:
        if group is None or group is dist.group.WORLD:
            return f"world ({dist.get_world_size()} ranks)"
        ranks = dist.get_process_group_ranks(group)
        return f"ranks {ranks}"
    except Exception:
        return "a subgroup"


def _group_of(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if "group" in kwargs:
        return kwargs["group"]
    if name == "batch_isend_irecv" and args and args[0]:
        return getattr(args[0][0], "group", None)
    return None


def _wrap(tracer: Tracer, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    @functools.wraps(original)
    def traced(*args: Any, **kwargs: Any) -> Any:
        entry = tracer.begin(name, _group_name(_group_of(name, args, kwargs)))
        try:
            result = original(*args, **kwargs)
        except Exception as exc:
            named = tracer.failed_with(entry, exc)
            if named is None:
                raise
            raise named from exc
        works = result if isinstance(result, list) else [result]
        entry.works = [w for w in works if hasattr(w, "is_completed")]
        if not entry.works and torch.cuda.is_available() and torch.cuda.is_initialized():
            event = torch.cuda.Event()
            event.record()
            entry.event = event
        entry.returned = True
        return result

    traced.__mcore_images_traced__ = True  # type: ignore[attr-defined]
    return traced


def _wrap_coalescing(tracer: Tracer, original: Callable[..., Any]) -> Callable[..., Any]:
    """``_coalescing_manager`` (megatron's DDP bucket reductions): the collectives recorded inside it are
    issued, and for a blocking manager waited on, when the block exits; one entry spans the block."""
    import torch

    @contextlib.contextmanager
    def traced(*args: Any, **kwargs: Any) -> Iterator[Any]:
        entry = tracer.begin("coalesced collectives", _group_name(kwargs.get("group", args[0] if args else None)))
        try:
            with original(*args, **kwargs) as manager:
                yield manager
        except Exception as exc:
            named = tracer.failed_with(entry, exc)
            if named is None:
                raise
            raise named from exc
        entry.works = [w for w in getattr(manager, "works", []) if hasattr(w, "is_completed")]
        if not entry.works and torch.cuda.is_available() and torch.cuda.is_initialized():
            event = torch.cuda.Event()
            event.record()
            entry.event = event
        entry.returned = True

    traced.__mcore_images_traced__ = True  # type: ignore[attr-defined]
    return traced


_TRACER: Tracer | None = None


def blamed() -> dict[str, Any] | None:
    """For a rank that is failing now: its collective state with ``timed_out`` naming the collective that
    raised (``raised``: its error already names it), else the oldest one still in flight (an error raised
    now likely came from it); None when no collective was involved."""
    if _TRACER is None:
        return None
    _TRACER.expired()  # drop what completed
    state = _TRACER.state()
    culprit = _TRACER.failed or state["outstanding"]
    return {**state, "timed_out": culprit, "raised": _TRACER.failed is not None} if culprit else None


def install(timeout_s: float, *, rank: int | None = None,
            on_expiry: Callable[[str, dict[str, Any]], None] | None = None,
            publish: Callable[[dict[str, Any]], None] | None = None) -> Tracer:
    """Trace torch.distributed's collectives in this process and start the monitor (idempotent)."""
    global _TRACER
    import torch.distributed as dist

    if _TRACER is not None:
        return _TRACER
    tracer = Tracer(timeout_s, int(os.environ.get("RANK", "0")) if rank is None else rank, on_expiry, publish)
    # Only torch.distributed's names: callers use those, and c10d's own module globals stay untouched
    # (its coalescing manager compares recorded ops with them by identity).
    for name in (*TRACED, "_coalescing_manager"):
        original = getattr(dist, name, None)
        if original is None or getattr(original, "__mcore_images_traced__", False):
            continue
        wrap = _wrap_coalescing(tracer, original) if name == "_coalescing_manager" else _wrap(tracer, name, original)
        setattr(dist, name, wrap)
    threading.Thread(target=tracer.watch, name="collective-monitor", daemon=True).start()
    _TRACER = tracer
    return tracer
