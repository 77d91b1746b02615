"""Dotted module paths ("" is the root): the one place that knows how they nest.

Capture uses :func:`module_chain` to give every node its enclosing modules; records, roll-ups and
reports use the same helper, so the module tree is built one way everywhere.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

__all__ = ["ancestors", "depth", "module_chain", "parent"]


def module_chain(paths: Iterable[str]) -> tuple[str, ...]:
    """Every module on the way to each of ``paths``, outermost first, root excluded.

    fx and torch.export list the modules a node was *called* inside; containers that are iterated
    rather than called (a ``ModuleList`` ``h`` of ``h.0.attn``) are missing, so every dotted prefix
    is added: ``("h.0", "h.0.attn") -> ("h", "h.0", "h.0.attn")``.
    """
    chain: dict[str, None] = {}
    for path in paths:
        if not path:
            continue
        parts = path.split(".")
        for i in range(1, len(parts) + 1):
            chain[".".join(parts[:i])] = None
    return tuple(chain)


def ancestors(path: str) -> tuple[str, ...]:
    """``"a.b" -> ("", "a", "a.b")``: the path and every module that contains it, root first."""
    return ("", *module_chain((path,)))


def parent(path: str, known: Container[str]) -> str:
    """The module a non-root ``path`` sits in: its longest dotted prefix in ``known`` ("" when none:
    the root). An iterated container that is no module of its own is skipped."""
    up = path
    while True:
        up = up.rpartition(".")[0]
        if up == "" or up in known:
            return up


def depth(path: str) -> int:
    """0 for the root, 1 for its children, ..."""
    return 0 if path == "" else path.count(".") + 1
