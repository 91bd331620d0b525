"""What a kube-scheduler filter says about a node it rejects.

The framework's status codes matter beyond the message: a node rejected ``Unschedulable`` may
take the pod once lower-priority pods are preempted, one rejected
``UnschedulableAndUnresolvable`` never will, and DefaultPreemption only looks at the former.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rejection:
    """A filter's verdict on one node: the reasons counted in ``FailedScheduling`` and whether
    preemption could change it (``Unschedulable``) or not (``UnschedulableAndUnresolvable``)."""

    reasons: tuple[str, ...]
    resolvable: bool

    @property
    def code(self) -> str:
        return "Unschedulable" if self.resolvable else "UnschedulableAndUnresolvable"


def unresolvable(reason: str) -> Rejection:
    return Rejection((reason,), False)


def resolvable(reason: str) -> Rejection:
    return Rejection((reason,), True)


__all__ = ["Rejection", "resolvable", "unresolvable"]
