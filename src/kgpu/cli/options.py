"""Flags that the long-running commands (``kgpu agent``, ``kgpu controller``) share, each
defined once, and the logging both set up.

Why: the two processes are deployed side by side by one Helm chart and documented together;
a flag they both take must read the same in ``--help`` and behave the same, which holds only
while there is one definition of it. Flags that mean something different in each (their
``--kubeconfig`` and ``--health-address`` say what the process does with them) stay with the
command.
"""

from __future__ import annotations

from typing import Annotated

import typer

InCluster = Annotated[
    bool,
    typer.Option("--in-cluster", help="Talk to the API server with the pod's service account."),
]
LogLevel = Annotated[str, typer.Option("--log-level", help="debug|info|warning|error.")]


def setup_logging(level: str) -> None:
    """Log to stderr at ``level`` (a ``--log-level`` value; an unknown one logs at info)."""
    import logging
    import sys

    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
