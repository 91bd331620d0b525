"""The Kubernetes Events the autoscalers emit, as data.

The controllers here are pure: they return the events the real ones would record (``type``
Normal|Warning, ``reason``, the object they are about, ``message``) and whoever drives them
records them (the simulator in its event list, with counts and timestamps).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    object: str  # "HorizontalPodAutoscaler/default/keda-hpa-x", "Pod/default/p", "Node/n"
    message: str


__all__ = ["Event"]
