"""What a renderer is: a name, the extension of the files it writes, and a function from a typed result
(an `AnalysisData`, or a `Comparison` for the diff) to the bytes of one output format.

The registries (`report.RENDERERS`, `report.DIFF_RENDERERS`) name each renderer's module and function
(`lazy`), so the command line reads the formats and their extensions without importing any renderer."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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


def lazy(module: str, function: str, text: bool = False) -> Callable[[Any], bytes]:
    """`module.function` (a module of this package) as a render function imported on its first call; `text`:
    it returns a str, written as UTF-8."""
    def render(result: Any) -> bytes:
        fn = getattr(importlib.import_module(module, __package__), function)
        out = fn(result)
        return out.encode("utf-8") if text else out  # type: ignore[no-any-return]

    return render


def format_of(path_name: str, renderers: dict[str, Renderer[Any]]) -> str | None:
    """The renderer whose extension a file name ends with (the longest that matches: `run.bmf.json` is
    BMF, `run.json` JSON), by name; None when none does."""
    name = path_name.lower()
    found = [r for r in renderers.values() if name.endswith("." + r.extension)]
    return max(found, key=lambda r: len(r.extension)).name if found else None
