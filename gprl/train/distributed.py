"""One search over several processes: ``torchrun --nproc_per_node=K train.py ...`` (``torch.distributed``).

All of the distributed plumbing lives here; the trainer and the tasks only call a few methods of
:class:`Dist`.

* Launch: ``torchrun`` sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; :func:`init` finds them and starts
  the process group (gloo for CPU tensors, NCCL for CUDA tensors) with the ``dist.timeout_s`` timeout. On
  CUDA, rank r of a node uses ``cuda:LOCAL_RANK``. Without ``torchrun`` (or with ``WORLD_SIZE=1``)
  :func:`init` returns a :class:`Dist` of world size 1 whose methods are the identity, so a single process
  runs the same code path as before.
* Sharding: every rank evaluates its contiguous shard of the population (:meth:`Dist.bounds`) on its own
  device with its own environments; the per-individual results are gathered in rank order
  (:meth:`Dist.gather`), so every rank holds the full vectors a single process computes. Rank 0 alone varies
  the population and :meth:`Dist.broadcast_population` sends the new one to every rank.
* Independence of K: everything random is keyed by *global* indices (environment ``i`` of the batch resets
  from ``seed + i``, see :mod:`gprl.envs.base`), and statistics over environments are per-environment partial
  sums gathered in global order and added by :func:`ordered_sum`, which gives the same bits for the same rows
  on any device, thread count or number of shards. So on the CPU a run over K processes is bit-identical to
  the single-process run with the same seed.
* Failures: a step that can fail on one rank runs inside :meth:`Dist.agree`: every rank learns whether any
  rank failed and raises (the failing rank its own error, the others a :class:`DistributedError` naming it),
  instead of the others waiting forever in the next collective. A dead or stuck rank makes the next
  collective fail after at most ``dist.timeout_s`` (sooner where the transport notices a closed connection);
  that failure is raised as a :class:`DistributedError` naming the step, the timeout and where to resume.
"""

from __future__ import annotations

import datetime
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from gprl.core.population import Population

BACKENDS = ("auto", "nccl", "gloo")
SHARD_MODES = ("population", "data")


class DistributedError(RuntimeError):
    """Another rank failed, died or stopped answering; raised on every surviving rank."""


def ordered_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over dim 0 by a fixed pairwise tree of element-wise additions.

    ``torch.sum`` picks its order by device, thread count and shape; this order depends only on the number of
    rows, so the same rows give the same bits everywhere (a sharded run reduces exactly as one process)."""
    if len(x) == 0:
        return torch.zeros(x.shape[1:], dtype=x.dtype, device=x.device)
    while len(x) > 1:
        if len(x) % 2:  # + 0.0 is exact
            x = torch.cat([x, torch.zeros_like(x[:1])])
        x = x[0::2] + x[1::2]
    return x[0]


def shard_bounds(n: int, world_size: int, rank: int) -> tuple[int, int]:
    """Contiguous shard ``[start, stop)`` of ``n`` items for ``rank``; sizes differ by at most one."""
    return n * rank // world_size, n * (rank + 1) // world_size


@dataclass
class Dist:
    """This process's place in the run (world size 1: a single process; every method is then the identity)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    timeout_s: float = 300.0
    backend: str = "auto"      # dist.backend as configured
    gloo_only: bool = True     # data collectives through gloo (CUDA tensors travel via the host)
    hint: str = ""             # appended to collective failures (where the last checkpoint is)
    owns_group: bool = False   # init() started the process group (close() ends it)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------ sharding
    def bounds(self, n: int, rank: int | None = None) -> tuple[int, int]:
        """This rank's (or ``rank``'s) contiguous shard ``[start, stop)`` of ``n`` items."""
        return shard_bounds(n, self.world_size, self.rank if rank is None else rank)

    def check_shardable(self, n: int, key: str, what: str) -> None:
        """A ValueError (same on every rank) when ``n`` items leave a rank without any."""
        if n < self.world_size:
            raise ValueError(
                f"{key}={n} is smaller than the number of processes ({self.world_size}): every rank "
                f"evaluates a contiguous shard of at least one {what}. Raise {key} to at least "
                f"{self.world_size} or launch fewer processes (torchrun --nproc_per_node / --nnodes).")

    # ------------------------------------------------------------------ devices
    def task_device(self, device: str) -> str | None:
        """The device a rank's task uses for the configured ``device`` (auto: None, the task's choice)."""
        if device == "auto":
            return None
        if not self.enabled:
            return device
        if device.startswith("cuda:"):
            raise ValueError(f"device={device} pins every rank to one GPU; set device=cuda (rank i of a node "
                             "then uses cuda:LOCAL_RANK) or device=auto")
        if device == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0:
                raise ValueError("device=cuda: this node has no CUDA GPU "
                                 f"(process LOCAL_RANK={self.local_rank}); set device=cpu (or auto)")
            if self.local_rank >= count:
                raise ValueError(f"device=cuda: this node has {count} GPU(s) but runs a process with "
                                 f"LOCAL_RANK={self.local_rank}; launch at most {count} processes per node "
                                 f"(torchrun --nproc_per_node={count}) or set device=cpu")
            return f"cuda:{self.local_rank}"
        if device == "cpu" and self.backend == "nccl":
            raise ValueError("dist.backend=nccl carries CUDA tensors only, but device=cpu; "
                             "set dist.backend=gloo (or auto) or device=cuda")
        return device

    def check_task_device(self, device: torch.device) -> None:
        """After the task chose its device (device=auto): one GPU per rank, NCCL only with CUDA tensors."""
        if not self.enabled:
            return
        if device.type == "cuda" and device.index != self.local_rank:
            count = torch.cuda.device_count()
            raise ValueError(f"rank {self.rank} (LOCAL_RANK={self.local_rank}) would run on {device}, but "
                             f"every rank needs its own GPU (this node has {count}); launch at most {count} "
                             "processes per node (torchrun --nproc_per_node) or set device=cpu")
        if device.type != "cuda" and self.backend == "nccl":
            raise ValueError(f"dist.backend=nccl carries CUDA tensors only, but the task runs on {device}; "
                             "set dist.backend=gloo (or auto), or device=cuda with a GPU environment backend")

    # ------------------------------------------------------------------ failure handling
    def _collective(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as err:
            first = (str(err).strip().splitlines() or [""])[0][:300]
            raise DistributedError(
                f"distributed: {what} failed on rank {self.rank} of {self.world_size} ({type(err).__name__}: "
                f"{first}). Another rank has probably died or stopped answering (a collective waits at most "
                f"dist.timeout_s={self.timeout_s:g} s).{self.hint}") from err

    @contextmanager
    def agree(self, what: str) -> Iterator[None]:
        """Runs the body on every rank, then all ranks agree on success: if any rank raised, the failing
        ranks re-raise their own error and the others raise a :class:`DistributedError` naming it. The body
        must not call collectives that a failing rank could skip (it may call none at all)."""
        if not self.enabled:
            yield
            return
        import torch.distributed as td

        error: BaseException | None = None
        try:
            yield
        except DistributedError:
            raise  # the group itself failed: no agreement possible
        except Exception as err:  # noqa: BLE001  (re-raised below, after every rank has heard of it)
            error = err
        flag = torch.tensor([1 if error is not None else 0], dtype=torch.int64)
        flags = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world_size)]
        self._collective(f"agreeing on {what}", td.all_gather, flags, flag)
        failed = [r for r, f in enumerate(flags) if int(f)]
        if not failed:
            return
        messages: list[Any] = [None] * self.world_size
        text = None if error is None else f"{type(error).__name__}: {error}"
        self._collective(f"agreeing on {what}", td.all_gather_object, messages, text)
        if error is not None:
            raise error
        r = failed[0]
        raise DistributedError(f"rank {r} failed while {what}: {messages[r]}")

    # ------------------------------------------------------------------ collectives
    def _data(self, t: torch.Tensor) -> torch.Tensor:
        return t.cpu() if self.gloo_only else t

    def gather(self, local: torch.Tensor, n: int, what: str = "gathering the results",
               per: int = 1) -> torch.Tensor:
        """The rows of every rank's shard of ``n`` items (``per`` rows an item; this rank's: ``local``), in
        rank order, on every rank: ``[n * per, ...]``."""
        if not self.enabled:
            return local
        import torch.distributed as td

        start, stop = self.bounds(n)
        if len(local) != (stop - start) * per:
            raise ValueError(f"gather: this rank holds {len(local)} rows, "
                             f"its shard is {(stop - start) * per}")
        # all_gather needs equal sizes: pad shards to the largest
        width = math.ceil(n / self.world_size) * per
        buf = torch.zeros((width, *local.shape[1:]), dtype=local.dtype, device=local.device)
        buf[: len(local)] = local
        buf = self._data(buf)
        parts = [torch.empty_like(buf) for _ in range(self.world_size)]
        self._collective(what, td.all_gather, parts, buf)
        rows = [p[: (b - a) * per]
                for p, (a, b) in zip(parts, (self.bounds(n, r) for r in range(self.world_size)))]
        return torch.cat(rows).to(local.device)

    def sum(self, t: torch.Tensor, what: str = "adding up partial results") -> torch.Tensor:
        """Element-wise sum over the ranks (use integer or float64 tensors; the float order is the
        transport's, not a single process's)."""
        if not self.enabled:
            return t
        import torch.distributed as td

        buf = self._data(t).clone()
        self._collective(what, td.all_reduce, buf)
        return buf.to(t.device)

    def broadcast_object(self, obj: Any, what: str = "sharing the run state") -> Any:
        """Rank 0's ``obj`` (picklable) on every rank."""
        if not self.enabled:
            return obj
        import torch.distributed as td

        box = [obj if self.is_main else None]
        self._collective(what, td.broadcast_object_list, box, src=0, device=torch.device("cpu"))
        return box[0]

    def broadcast_population(self, pop: Population | None, *, size: int, n_in: int, n_out: int, max_len: int,
                             device: torch.device, what: str = "sharing the population") -> Population:
        """Rank 0's population (``pop``; ignored elsewhere) on every rank, as one byte buffer (NCCL has no
        int16)."""
        if not self.enabled:
            assert pop is not None
            return pop
        import torch.distributed as td

        if self.is_main:
            assert pop is not None and tuple(pop.kind.shape) == (size, max_len)
            buf = pack_population(pop)
        else:
            buf = torch.empty(population_bytes(size, max_len), dtype=torch.uint8, device=device)
        buf = self._data(buf)
        self._collective(what, td.broadcast, buf, src=0)
        return unpack_population(buf.to(device), size, max_len, n_in, n_out)

    def close(self) -> None:
        """Ends the process group started by :func:`init`. No barrier: after the last collective the ranks
        finish on their own (rank 0 may spend long on exports and W&B uploads)."""
        if not self.owns_group:
            return
        import torch.distributed as td

        if td.is_initialized():
            td.destroy_process_group()
        self.owns_group = False


_DTYPES = Population.empty(1, 1, 1, device="meta").tensors()


def population_bytes(size: int, max_len: int) -> int:
    return size * max_len * sum(t.element_size() for t in _DTYPES)


def pack_population(pop: Population) -> torch.Tensor:
    """The population's tensors as one flat uint8 tensor (one broadcast; NCCL has no int16)."""
    return torch.cat([t.contiguous().view(torch.uint8).reshape(-1) for t in pop.tensors()])


def unpack_population(buf: torch.Tensor, size: int, max_len: int, n_in: int, n_out: int) -> Population:
    out, at = [], 0
    for t in _DTYPES:
        nb = size * max_len * t.element_size()
        # clone first: a view of another dtype needs an aligned offset, which an odd size * max_len breaks
        out.append(buf[at:at + nb].clone().view(t.dtype).reshape(size, max_len))
        at += nb
    return Population(*out, n_in=n_in, n_out=n_out)


def launched() -> bool:
    """Whether this process is one of several started by torchrun (``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None or not value.strip().lstrip("-").isdigit():
        raise ValueError(f"WORLD_SIZE is set but {name} is {value!r}: launch with torchrun (it sets RANK, "
                         "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT)")
    return int(value)


def init(cfg: dict[str, Any]) -> Dist:
    """The :class:`Dist` of this process from torchrun's environment and the ``dist`` config section."""
    dcfg = dict(cfg.get("dist") or {})
    timeout = dcfg.get("timeout_s", 300.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"dist.timeout_s must be a positive number of seconds, got {timeout!r}")
    backend = dcfg.get("backend", "auto")
    if backend not in BACKENDS:
        raise ValueError(f"dist.backend must be one of {list(BACKENDS)}, got {backend!r}")
    shard = dcfg.get("shard", "population")
    if shard not in SHARD_MODES:
        raise ValueError(f"dist.shard must be one of {list(SHARD_MODES)}, got {shard!r}")
    if not launched():
        return Dist(timeout_s=float(timeout), backend=backend)
    rank, world, local_rank = _env_int("RANK"), _env_int("WORLD_SIZE"), _env_int("LOCAL_RANK")
    import torch.distributed as td

    cuda = torch.cuda.is_available()
    gloo_only = backend == "gloo" or not cuda
    if cuda and local_rank < torch.cuda.device_count():
        torch.cuda.set_device(local_rank)  # NCCL and the environments' default device
    d = Dist(rank=rank, world_size=world, local_rank=local_rank, timeout_s=float(timeout), backend=backend,
             gloo_only=gloo_only)
    if td.is_initialized():  # started by the caller (e.g. a multirun job after the first): reuse it
        if td.get_world_size() != world or td.get_rank() != rank:
            raise ValueError("a process group of another shape is already initialised")
        return d
    # control messages (error flags, objects) always travel on CPU tensors through gloo; data tensors on
    # CUDA through NCCL unless dist.backend=gloo
    pg_backend = "gloo" if gloo_only else "cpu:gloo,cuda:nccl"
    d._collective("starting the process group (rendezvous)", td.init_process_group, backend=pg_backend,
                  timeout=datetime.timedelta(seconds=float(timeout)))
    d.owns_group = True
    with d.agree("checking the distributed configuration"):
        if backend == "nccl" and not cuda:
            raise ValueError("dist.backend=nccl needs CUDA GPUs, and this node has none; "
                             "set dist.backend=gloo (or auto)")
    return d
