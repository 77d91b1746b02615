"""Communication rules (a leaf of the package): which graph targets are collectives, the bytes a
collective moves, DTensor's local shards, and the rank of this process. The merged report of a
distributed run's profiles is :mod:`torch_flops.distributed` (a view).

Bytes a collective moves (``comm_bytes``: what this rank sends; the standard ring algorithms are
symmetric, so it receives as much), for a tensor of ``S`` bytes over a group of ``n`` ranks
(Thakur, Rabenseifner and Gropp, "Optimization of Collective Communication Operations in MPICH",
2005; NCCL's "performance.md" bus-bandwidth factors):

=====================  ======================================================================
all_reduce             2 (n - 1) / n x S   (ring: a reduce-scatter, then an all-gather)
all_gather             (n - 1) / n x S_out  ((n - 1) x the input)
reduce_scatter         (n - 1) / n x S_in   ((n - 1) x the output)
all_to_all             (n - 1) / n x S      (each rank keeps its own 1/n)
broadcast, reduce      S                    (pipelined chain: every rank passes S on once)
send, recv             S
barrier, wait          0                    (a wait is the time an async collective took)
=====================  ======================================================================

A group of one rank moves nothing. Collectives never have FLOPs (a reduction's adds are the
network's, not the model's).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

__all__ = ["COMM_NAMESPACES", "comm_bytes", "distributed_settings", "has_dtensor", "is_communication",
           "is_dtensor_value", "local_value", "rank_path"]

#: the op namespaces of collectives: c10d's ProcessGroup ops and the functional collectives
#: (which DTensor's redistributions use)
COMM_NAMESPACES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd"})


#: ops of those namespaces that only wrap a tensor (no communication, no wait)
_NOT_COMMUNICATION = frozenset({"_wrap_tensor_autograd"})


def is_communication(target: Any) -> bool:
    """Whether a graph target is a collective, or the wait for one (an op of
    :data:`COMM_NAMESPACES`)."""
    return (isinstance(target, torch._ops.OpOverload) and target.namespace in COMM_NAMESPACES
            and target._opname not in _NOT_COMMUNICATION)


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def _group_size(args: Iterable[Any], kwargs: Mapping[str, Any], schema: Any) -> int:
    """The ranks in the op's group: a ProcessGroup argument's size, a ``group_size`` argument, or
    the group named by ``group_name``."""
    named = dict(zip((a.name for a in schema.arguments), args))
    named.update(kwargs)
    if isinstance(named.get("group_size"), int):
        return int(named["group_size"])
    for value in named.values():
        group = _process_group(value)
        if group is not None:
            return int(group.size())
    name = named.get("group_name")
    if isinstance(name, str):
        from torch.distributed.distributed_c10d import _resolve_process_group

        try:
            return int(_resolve_process_group(name).size())  # type: ignore[arg-type]
        except (RuntimeError, ValueError):  # no such group (no process group at all): fall through
            pass
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_world_size())
    return 1


def _process_group(value: Any) -> Any:
    """The ProcessGroup an op argument is (c10d's ops box it as a ``torch.ScriptObject``)."""
    dist = torch.distributed
    if isinstance(value, dist.ProcessGroup):
        return value
    if type(value).__name__ == "ScriptObject":
        try:
            return dist.ProcessGroup.unbox(value)
        except (RuntimeError, TypeError):
            return None
    return None


#: op name (without overload) -> bytes this rank sends, from (input bytes, output bytes, n)
_RULES: dict[str, Callable[[int, int, int], float]] = {}


def _rule(*names: str) -> Callable[[Callable[[int, int, int], float]], Callable[[int, int, int], float]]:
    def wrap(fn: Callable[[int, int, int], float]) -> Callable[[int, int, int], float]:
        for name in names:
            _RULES[name] = fn
        return fn
    return wrap


@_rule("allreduce_", "allreduce_coalesced_", "all_reduce", "all_reduce_", "all_reduce_coalesced",
       "all_reduce_coalesced_")
def _all_reduce(size_in: int, size_out: int, n: int) -> float:
    return 2 * (n - 1) / n * size_in  # ring: reduce-scatter then all-gather, (n-1)/n of S each


@_rule("allgather_", "_allgather_base_", "allgather_into_tensor_coalesced_", "all_gather_into_tensor",
       "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced", "allgather_coalesced_")
def _all_gather(size_in: int, size_out: int, n: int) -> float:
    return (n - 1) / n * size_out  # every rank receives the n - 1 chunks it lacks (and sends as many)


@_rule("reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_", "reduce_scatter_tensor",
       "reduce_scatter_tensor_coalesced")
def _reduce_scatter(size_in: int, size_out: int, n: int) -> float:
    return (n - 1) / n * size_in


@_rule("alltoall_", "alltoall_base_", "all_to_all_single")
def _all_to_all(size_in: int, size_out: int, n: int) -> float:
    return (n - 1) / n * size_in  # a rank keeps its own 1/n


@_rule("broadcast_", "broadcast", "broadcast_", "reduce_", "send", "recv_", "recv_any_source_")
def _whole(size_in: int, size_out: int, n: int) -> float:
    return float(size_in)


#: one-to-all and all-to-one collectives: the root sends (scatter) or receives (gather) n - 1
#: chunks, every other rank its one chunk; the chunk is this rank's output (scatter) or input (gather)
_ROOTED = {"scatter_": "output", "gather_": "input"}


_INPUTS = ("input_tensor", "input_tensors", "input", "inputs", "tensors", "tensor", "self")
_OUTPUTS = ("output_tensor", "output_tensors", "output", "outputs", "out")


def comm_bytes(target: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any) -> int:
    """Bytes this rank sends for one collective call (the module docstring's table); 0 for waits,
    barriers and ops of :data:`COMM_NAMESPACES` that move nothing themselves. The input and output
    are found by their names in the op's schema (c10d's ops take the output first)."""
    name = target._opname
    rule = _RULES.get(name)
    if rule is None and name not in _ROOTED:
        return 0
    n = _group_size(args, kwargs, target._schema)
    if n <= 1:
        return 0
    named = dict(zip((a.name for a in target._schema.arguments), args))
    named.update(kwargs)
    if name in _ROOTED:
        return _rooted_bytes(name, named, n)
    size_in = next((_tensor_bytes(named[k]) for k in _INPUTS if k in named), 0)
    size_out = next((_tensor_bytes(named[k]) for k in _OUTPUTS if k in named), None)
    if size_out is None:  # a functional collective returns its output
        size_out = _tensor_bytes(out[0] if isinstance(out, tuple) and out else out)
    assert rule is not None  # the rooted ones returned above
    return round(rule(size_in, size_out, n))


def _rooted_bytes(name: str, named: Mapping[str, Any], n: int) -> int:
    chunk_key = "output_tensors" if _ROOTED[name] == "output" else "input_tensors"
    chunk = named.get(chunk_key)
    first = chunk[0] if isinstance(chunk, (list, tuple)) and chunk else chunk
    size = _tensor_bytes(first[0] if isinstance(first, (list, tuple)) and first else first)
    group = next((g for g in map(_process_group, named.values()) if g is not None), None)
    root = named.get("root_rank", named.get("rootRank", 0))
    rank = group.rank() if group is not None else 0
    return size * (n - 1) if rank == root else size


def local_value(value: Any) -> Any:
    """``value`` with every DTensor replaced by its local shard (this rank's part of it)."""
    if _is_dtensor(value):
        return value._local_tensor
    if isinstance(value, (list, tuple)):
        items = [local_value(v) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {k: local_value(v) for k, v in value.items()}
    return value


def has_dtensor(values: Iterable[Any]) -> bool:
    """Whether any of ``values`` (arguments, nested one level) is a DTensor."""
    for v in values:
        if _is_dtensor(v) or (isinstance(v, (list, tuple)) and any(_is_dtensor(x) for x in v)):
            return True
    return False


def is_dtensor_value(value: Any) -> bool:
    """Whether ``value`` (a node's output) is a DTensor, or a tuple or list holding one."""
    if isinstance(value, (tuple, list)):
        return any(_is_dtensor(v) for v in value)
    return _is_dtensor(value)


def _is_dtensor(value: Any) -> bool:
    return type(value).__name__ == "DTensor" and hasattr(value, "_local_tensor")


def distributed_settings() -> dict[str, int]:
    """``{"rank": r, "world_size": n}`` under an initialised process group, or as a launcher
    (torchrun) set them in ``RANK``/``WORLD_SIZE`` before any group exists; else ``{}``."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return {"rank": dist.get_rank(), "world_size": dist.get_world_size()}
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and world is not None and rank.isdigit() and world.isdigit():
        return {"rank": int(rank), "world_size": int(world)}
    return {}


def rank_path(path: str | os.PathLike[str]) -> str:
    """``path`` with ``{rank}`` replaced by this process's rank (:func:`distributed_settings`; 0
    outside a distributed run), so that every rank writes its own file: ``profile-{rank}.json``."""
    text = os.fspath(path)
    if "{rank}" not in text:
        return text
    return text.replace("{rank}", str(distributed_settings().get("rank", 0)))
