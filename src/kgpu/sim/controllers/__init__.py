"""The controllers of the simulated cluster's control plane, one module per controller, as
kube-controller-manager and the MPI operator have them: ``deployment``, ``replicaset``,
``job``, ``statefulset``, ``daemonset``, ``mpijob`` (workload controllers over ``base``, run in
order by ``manager``), ``resourceclaim`` (claims from templates), and the autoscalers ``keda``,
``hpa`` and ``cluster_autoscaler`` (over ``scale``, the scale subresource), which also act on a
period as the clock advances (:mod:`kgpu.sim.loops`).

Names follow the real controllers: a Deployment's ReplicaSet is ``<deployment>-<template
hash>``; ReplicaSet, Job and DaemonSet pods are ``<owner>-<5 random chars>`` (Indexed Jobs
``<job>-<index>-<5 chars>``); StatefulSet pods ``<name>-<ordinal>``, created one at a time under
``OrderedReady``; an MPIJob's workers ``<job>-worker-<i>`` (a gang: placed all or none) and its
launcher a Job ``<job>-launcher``. Simplifications, stated: a template change replaces the old
ReplicaSet at once (no rolling surge), and pods only end when a scenario's ``runtimes`` say so
or they are evicted.
"""

from kgpu.sim.controllers.base import API_VERSIONS, OWNED_KINDS, WorkloadController
from kgpu.sim.controllers.manager import ControllerManager
from kgpu.sim.controllers.resourceclaim import ResourceClaimController

__all__ = [
    "API_VERSIONS",
    "OWNED_KINDS",
    "ControllerManager",
    "ResourceClaimController",
    "WorkloadController",
]
