"""The tool boundary: what the tool executor runs."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ._gateway import ToolSpec

__all__ = ["Tool"]


@runtime_checkable
class Tool(Protocol):
    """A callable tool. ``run`` gets arguments already validated against ``spec.parameters``
    (by ``validate``) and returns the text the model will read. It may raise anything: the
    executor turns every exception into an error output, never a crash."""

    @property
    def spec(self) -> ToolSpec:
        """Name, description and argument schema, as the model sees them."""
        ...

    @property
    def timeout(self) -> float | None:
        """Seconds this tool may take; ``None`` uses the executor's default."""
        ...

    def validate(self, arguments: Any) -> Any:
        """Check decoded JSON arguments; raise ``ValueError`` with a readable message if bad."""
        ...

    async def run(self, arguments: Any) -> str:
        """Do the work."""
        ...
