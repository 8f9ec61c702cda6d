"""What a renderer is: a name, the extension of the files it writes, and a function from a typed result
(an `AnalysisData`, or a `Comparison` for the diff) to the bytes of one output format."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Renderer(Generic[T]):
    """One output format of a result: chosen by `name` from a registry, written to `*.extension`."""

    name: str
    extension: str
    render: Callable[[T], bytes]

    def __call__(self, result: T) -> bytes:
        return self.render(result)


def registry(*renderers: Renderer[T]) -> dict[str, Renderer[T]]:
    """The renderers by name."""
    return {r.name: r for r in renderers}


def encoded(fn: Callable[[T], str]) -> Callable[[T], bytes]:
    """A renderer of text as one of UTF-8 bytes."""
    return lambda result: fn(result).encode("utf-8")
