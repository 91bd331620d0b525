"""Which kube-scheduler the simulated cluster runs: the scenario key ``kubernetesVersion``.

Releases word some messages differently and treat a few cases differently; a platform team
compares ``kgpu sim`` with the cluster it has, so the simulator speaks the release the scenario
names. What differs between the releases kgpu models (each from the upstream change that made
it; docs/simulator.md lists them for users):

* TaintToleration: up to 1.34.1 the message names the taint (``node(s) had untolerated taint
  {key: value}``); from 1.34.2 and 1.35.0 it does not (``node(s) had untolerated taint(s)``,
  kubernetes#134740, cherry-picked as #135023 into v1.34.2).
* NodeResourcesFit: from 1.34 a node whose *allocatable* is smaller than the pod's request is
  UnschedulableAndUnresolvable (preemption cannot help there, kubernetes#131345); before, it was
  Unschedulable like a node that is merely full, so preemption tried it.
* DynamicResources PostFilter: in 1.32 (DRA beta, on when a DRA driver is installed) a pod
  without claims that fails to schedule gets ``no new claims to deallocate`` in front of the
  preemption result; from 1.33 that note is gone (kubernetes#129823).

A version given as ``"1.34"`` means the newest patch release kgpu knows of that minor. The
feature gates each release has and their defaults (``DRAExtendedResource`` is off before 1.36,
for one) come from the one release table, :mod:`kgpu.releases`; a scenario's ``featureGates``
overrides them as ``--feature-gates`` does on kube-scheduler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kgpu import releases

#: The minor releases kgpu models (a scenario may name any; only ``releases.SUPPORTED`` are
#: supported, the others run with a warning).
SUPPORTED_MINORS = releases.MODELLED
DEFAULT_VERSION = f"1.{releases.NEWEST}"
#: A patch number that stands for "the newest patch release" of a minor.
LATEST_PATCH = 10**6

_VERSION = re.compile(r"^v?1\.(\d+)(?:\.(\d+))?$")


@dataclass(frozen=True, order=True)
class KubeVersion:
    """A Kubernetes release as ``(minor, patch)`` of major 1."""

    minor: int
    patch: int = LATEST_PATCH

    def __str__(self) -> str:
        return f"1.{self.minor}" if self.patch == LATEST_PATCH else f"1.{self.minor}.{self.patch}"

    def at_least(self, minor: int, patch: int = 0) -> bool:
        return (self.minor, self.patch) >= (minor, patch)

    # -- what differs between releases ----------------------------------------------------------
    @property
    def taint_names_taint(self) -> bool:
        """TaintToleration's message names the untolerated taint."""
        return not (self.at_least(35) or (self.minor == 34 and self.patch >= 2))

    @property
    def fit_unresolvable_beyond_allocatable(self) -> bool:
        """NodeResourcesFit marks a node too small for the pod as unresolvable by preemption."""
        return self.at_least(34)

    @property
    def dra_note_without_claims(self) -> bool:
        """DynamicResources' PostFilter says "no new claims to deallocate" for claim-less pods."""
        return not self.at_least(33)


def version_problem(value: object) -> str | None:
    """Why ``value`` is not a ``kubernetesVersion`` kgpu models, or None."""
    if isinstance(value, bool) or not isinstance(value, (str, float)):
        return f'{value!r}: must be a Kubernetes release such as "1.37" or "1.36.1" (quoted)'
    text = str(value)
    match = _VERSION.match(text)
    oldest, newest = SUPPORTED_MINORS[0], SUPPORTED_MINORS[-1]
    if match is None:
        return f'{text!r}: must be a Kubernetes release such as "1.37" or "1.36.1"'
    if int(match.group(1)) not in SUPPORTED_MINORS:
        hint = " (quote it: YAML reads 1.30 as the number 1.3)" if isinstance(value, float) else ""
        return (
            f"{text!r}: kgpu models Kubernetes 1.{oldest} to 1.{newest} (supports "
            f"{releases.window()}){hint}"
        )
    return None


def parse_version(value: object = DEFAULT_VERSION) -> KubeVersion:
    """A :class:`KubeVersion` from a scenario value (``"1.37"``, ``"1.34.1"``, ``"v1.33.2"``);
    ValueError with :func:`version_problem`'s text when it is none kgpu models."""
    problem = version_problem(value)
    if problem:
        raise ValueError(problem)
    match = _VERSION.match(str(value))
    assert match is not None
    patch = match.group(2)
    return KubeVersion(int(match.group(1)), LATEST_PATCH if patch is None else int(patch))


__all__ = [
    "DEFAULT_VERSION",
    "SUPPORTED_MINORS",
    "KubeVersion",
    "parse_version",
    "version_problem",
]
