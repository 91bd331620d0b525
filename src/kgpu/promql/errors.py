"""What goes wrong with a query, and where.

Prometheus reports a bad query as ``LINE:COLUMN: parse error: ...``; KEDA users paste multi-line
queries from YAML block scalars, so kgpu keeps the same ``line:column`` prefix (both 1-based) and
adds what the user can do. A query that is valid PromQL but uses a part kgpu does not evaluate
raises :class:`UnsupportedError`, naming the part and listing what is supported, never a silent
wrong answer.
"""

from __future__ import annotations


class PromQLError(ValueError):
    """A query that cannot be parsed or evaluated. ``position`` is a 0-based character offset
    into ``query`` (``-1`` when the problem has no single place, e.g. a run-time error)."""

    def __init__(self, message: str, position: int = -1, query: str = "") -> None:
        self.message = message
        self.position = position
        self.query = query
        super().__init__(self._render())

    def _render(self) -> str:
        if self.position < 0 or not self.query:
            return self.message
        before = self.query[: self.position]
        line = before.count("\n") + 1
        column = self.position - (before.rfind("\n") + 1) + 1
        return f"{line}:{column}: {self.message}"

    def located(self, query: str) -> PromQLError:
        """The same error, its position read against ``query``."""
        return type(self)(self.message, self.position, query)


class UnsupportedError(PromQLError):
    """Valid PromQL that kgpu does not evaluate (e.g. ``histogram_quantile``, subqueries)."""
