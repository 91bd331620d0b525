"""The kubeconfig a process under test reads to reach the API-server stand-in.

Tests, benchmarks and child processes (agent, controller) all connect the way a user's
kubectl would, through a kubeconfig file, so the official client's own loading path runs.
"""

from __future__ import annotations

from pathlib import Path

#: The bearer token the tests' stand-in expects (``FakeApiServer(token=TOKEN)``); a stand-in
#: started without a token accepts any.
TOKEN = "kgpu-test-token"


def write_kubeconfig(path: Path, server: str, token: str = TOKEN) -> Path:
    """A kubeconfig as kubectl writes it: one cluster, one token user, one current context."""
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {server}
users:
- name: agent
  user:
    token: {token}
contexts:
- name: fake
  context:
    cluster: fake
    user: agent
current-context: fake
"""
    )
    return path
