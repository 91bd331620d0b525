"""The Kubernetes releases kgpu models, in one table: feature gates, API versions, kubelet
services, and the window kgpu supports.

Why one table: the simulator (``kubernetesVersion``), ``kgpu allocate`` (``--kubernetes-version``),
the agent (the API server it discovers), the API stand-in and the Helm chart each need to know
what a release does. When each kept its own list they disagreed (a 1.33 scenario ran
``DRAExtendedResource``, which 1.33 does not have). Everything release-dependent reads this
module; it is data plus lookups, no I/O.

Sources (facts only, read per release):

* Feature gates: kubernetes/kubernetes ``pkg/features/kube_features.go`` and, from 1.36, the
  scheduler/DRA gates' versioned specs (``defaultVersionedKubernetesFeatureGates``: one
  ``{Version, Default, PreRelease, LockToDefault}`` entry per change, so the newest file gives
  every release's default). Read on the 1.37 tree; 1.32-1.35 cross-checked against those
  releases' ``kube_features.go``.
* ``resource.k8s.io`` versions: the OpenAPI schemas of each release (as shipped by
  ``kubernetes-validate`` 1.37.0: ``v1.32.0`` ... ``v1.37.0``); which are on without
  ``--runtime-config`` follows KEP-3136 (beta API versions are off by default), so only ``v1``
  (1.34+) is served by default.
* Kubelet DRA services: the kubelet's ``validateSupportedServices`` (``v1beta1.DRAPlugin`` and
  ``v1alpha4.Node`` in 1.32-1.33, ``v1.DRAPlugin`` and ``v1beta1.DRAPlugin`` from 1.34) and its
  DRA health clients, picked from the services a plugin registers (``pickHealthService``):
  ``v1alpha1.DRAResourceHealth`` from 1.34, ``v1.DRAResourceHealth`` preferred from 1.37; the
  kubelet opens the stream when ``ResourceHealthStatus`` is on, which it is by default from 1.36
  (beta; kubernetes' DRA health e2e test, ``minKubeletVersionForHealth``/``...V1``).

A gate a release does not have is ``None`` for that release: kube-scheduler refuses
``--feature-gates`` naming it, and so does kgpu. ``LockToDefault`` gates cannot be set to the
other value (kube-scheduler: ``cannot set feature gate X to false, feature is locked to true``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ALPHA, BETA, GA, DEPRECATED = "alpha", "beta", "GA", "deprecated"

#: Every minor release kgpu models (what ``kubernetesVersion`` accepts), oldest first.
MODELLED = (32, 33, 34, 35, 36, 37)
#: The releases kgpu supports: the four newest. 1.32 and 1.33 are past upstream support; kgpu
#: still models them (a ``kubernetesVersion: "1.33"`` scenario runs, with a warning), the agent
#: treats such a server as the oldest supported release, and the chart refuses them.
SUPPORTED = (34, 35, 36, 37)
NEWEST = MODELLED[-1]


@dataclass(frozen=True)
class GateState:
    """One gate in one release."""

    default: bool
    stage: str
    locked: bool = False  # LockToDefault: cannot be set to the other value


@dataclass(frozen=True)
class Gate:
    """A feature gate kgpu models: which component reads it, and its history as upstream's
    versioned specs list it (``(minor, default, stage, locked)``, oldest first)."""

    name: str
    component: str
    what: str
    history: tuple[tuple[int, bool, str, bool], ...]
    #: the newest release whose source was read for this gate; later ones repeat its state
    read_to: int = 37

    def at(self, minor: int) -> GateState | None:
        """The gate in release ``1.<minor>``; None when that release does not have it."""
        found: GateState | None = None
        for since, default, stage, locked in self.history:
            if since <= minor:
                found = GateState(default, stage, locked)
        return found

    def since(self) -> int:
        return self.history[0][0]


def _g(
    name: str, component: str, what: str, *history: tuple[int, bool, str, bool], read_to: int = 37
) -> Gate:
    return Gate(name, component, what, history, read_to)


SCHED = "kube-scheduler"
APISERVER = "kube-apiserver"
KUBELET = "kubelet"

#: The gates kgpu models, by name. The allocator gates are also in
#: :data:`kgpu.dra.features.GATES` (their ``Features`` fields).
GATES: dict[str, Gate] = {
    g.name: g
    for g in (
        _g(
            "DynamicResourceAllocation",
            SCHED,
            "DRA itself (structured parameters); kgpu sim turns it on with a DRA driver",
            (26, False, ALPHA, False),
            (32, False, BETA, False),
            (34, True, GA, False),
            (35, True, GA, True),
        ),
        _g(
            "DRAAdminAccess",
            SCHED,
            "adminAccess requests",
            (32, False, ALPHA, False),
            (34, True, BETA, False),
            (36, True, GA, True),
        ),
        _g(
            "DRAPrioritizedList",
            SCHED,
            "firstAvailable subrequests",
            (33, False, ALPHA, False),
            (34, True, BETA, False),
            (36, True, GA, False),
            (37, True, GA, True),
        ),
        _g(
            "DRAPartitionableDevices",
            SCHED,
            "sharedCounters, consumesCounters, perDeviceNodeSelection",
            (33, False, ALPHA, False),
            (36, True, BETA, False),
        ),
        _g(
            "DRADeviceTaints",
            SCHED,
            "device taints and request tolerations (and, before 1.35, DeviceTaintRules)",
            (33, False, ALPHA, False),
            (36, True, BETA, False),
            (37, True, GA, False),
        ),
        _g(
            "DRADeviceTaintRules",
            SCHED,
            "DeviceTaintRule objects (1.36: beta but off, its API version is off by default)",
            (35, False, ALPHA, False),
            (36, False, BETA, False),
            (37, True, GA, False),
        ),
        _g(
            "DRADeviceBindingConditions",
            SCHED,
            "bindingConditions, bindingFailureConditions, bindsToNode",
            (34, False, ALPHA, False),
            (36, True, BETA, False),
        ),
        _g(
            "DRAResourceClaimDeviceStatus",
            SCHED,
            "device status in claims (binding conditions need it too)",
            (32, False, ALPHA, False),
            (33, True, BETA, False),
            (37, True, GA, True),
        ),
        _g(
            "DRAConsumableCapacity",
            SCHED,
            "allowMultipleAllocations, capacity requests, distinctAttribute",
            (34, False, ALPHA, False),
            (36, True, BETA, False),
        ),
        _g(
            "DRAExtendedResource",
            SCHED,
            "DeviceClass.extendedResourceName backs pod extended-resource requests",
            (34, False, ALPHA, False),
            (36, True, BETA, False),
            (37, True, GA, True),
        ),
        _g(
            "DRASchedulerFilterTimeout",
            SCHED,
            "the DynamicResources Filter gives up on a node after 10 s",
            (34, True, BETA, False),
        ),
        _g(
            "ResourceHealthStatus",
            KUBELET,
            "the kubelet streams device health from a DRAResourceHealth service into pod status",
            (31, False, ALPHA, False),
            (36, True, BETA, False),
        ),
    )
}


@dataclass(frozen=True)
class Release:
    """What one minor release serves and calls."""

    minor: int
    #: ``resource.k8s.io`` versions the API server can serve (with DRA on), newest first
    resource_versions: tuple[str, ...]
    #: of those, the ones on without ``--runtime-config`` (beta versions are off by default)
    resource_default: tuple[str, ...]
    #: versions DeviceTaintRule is served in, newest first (() before 1.33)
    taint_rule_versions: tuple[str, ...]
    #: the DRA plugin gRPC services the kubelet knows, newest (preferred) first
    kubelet_services: tuple[str, ...]
    #: the DRA health services the kubelet can stream from (when ``ResourceHealthStatus`` is
    #: on and the plugin registers one), preferred first
    health_services: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"1.{self.minor}"

    @property
    def supported(self) -> bool:
        return self.minor in SUPPORTED

    def gate(self, name: str) -> GateState | None:
        """``name`` in this release (None: the release does not have it)."""
        return GATES[name].at(self.minor)

    def gate_defaults(self) -> dict[str, bool]:
        """``{gate: default}`` for every modelled gate this release has."""
        out: dict[str, bool] = {}
        for name, gate in GATES.items():
            state = gate.at(self.minor)
            if state is not None:
                out[name] = state.default
        return out


_BETA1_ALPHA4 = ("v1beta1.DRAPlugin", "v1alpha4.Node")
_V1_BETA1 = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
_ALL = ("v1", "v1beta2", "v1beta1")
_HEALTH_ALPHA = ("v1alpha1.DRAResourceHealth",)

RELEASES: dict[int, Release] = {
    r.minor: r
    for r in (
        Release(32, ("v1beta1",), (), (), _BETA1_ALPHA4),
        Release(33, ("v1beta2", "v1beta1"), (), ("v1alpha3",), _BETA1_ALPHA4),
        Release(34, _ALL, ("v1",), ("v1alpha3",), _V1_BETA1, _HEALTH_ALPHA),
        Release(35, _ALL, ("v1",), ("v1alpha3",), _V1_BETA1, _HEALTH_ALPHA),
        Release(36, _ALL, ("v1",), ("v1beta2", "v1alpha3"), _V1_BETA1, _HEALTH_ALPHA),
        Release(
            37,
            _ALL,
            ("v1",),
            ("v1", "v1beta2", "v1alpha3"),
            _V1_BETA1,
            ("v1.DRAResourceHealth", *_HEALTH_ALPHA),
        ),
    )
}

_VERSION = re.compile(r"^v?1\.(\d+)(?:[.+-].*)?$")


def parse_minor(text: str) -> int:
    """The minor of ``"1.37"``, ``"v1.36.2"``, ``"v1.35.1-gke.100"``; ValueError otherwise."""
    found = _VERSION.match(text.strip())
    if found is None:
        raise ValueError(f"Kubernetes version {text!r}: expected 1.<minor>, e.g. 1.37 or v1.36.2")
    return int(found.group(1))


def parse_modelled(text: str) -> int:
    """The minor of a release kgpu models (``"1.36"``, ``"v1.37.1"``); ValueError naming the
    modelled and supported releases otherwise."""
    minor = parse_minor(text)
    if minor not in RELEASES:
        raise ValueError(
            f"Kubernetes version {text!r}: kgpu models 1.{MODELLED[0]} to 1.{MODELLED[-1]} "
            f"(supports {window()})"
        )
    return minor


def release(minor: int) -> Release:
    """The modelled release ``1.<minor>``; KeyError when kgpu does not model it."""
    return RELEASES[minor]


def nearest(minor: int) -> int:
    """The supported release whose behaviour a server of ``1.<minor>`` gets: itself when
    supported, else the oldest or newest supported one."""
    return min(max(minor, SUPPORTED[0]), SUPPORTED[-1])


def window() -> str:
    """The supported window as text (``1.34-1.37``)."""
    return f"1.{SUPPORTED[0]}-1.{SUPPORTED[-1]}"


def server_release(git_version: str) -> tuple[int, str | None]:
    """For an API server's ``gitVersion`` (``v1.36.2``, ``v1.33.4-eks-1``, ""): the supported
    release whose behaviour kgpu gives it, and the log line saying why when that is not its
    own (outside the window, or a version kgpu cannot read). Never raises: an agent meets
    whatever its cluster runs."""
    try:
        minor = parse_minor(git_version)
    except ValueError:
        return NEWEST, (
            f"cannot read the API server's version {git_version!r}; kgpu behaves as for "
            f"1.{NEWEST}, the newest release it supports"
        )
    return nearest(minor), support_problem(minor)


def gate_off_note(minor: int, gate: str, needs: str) -> str | None:
    """When release ``1.<minor>`` has ``gate`` off by default: a line saying so and what it
    takes (``needs``: what the gate's feature is used for), for a component that publishes
    objects using the feature; None when the gate is on by default there."""
    rel = RELEASES.get(nearest(minor) if minor not in RELEASES else minor)
    state = rel.gate(gate) if rel is not None else None
    if state is not None and state.default:
        return None
    if state is None:  # no gate to turn on: the release does not serve the feature at all
        since = GATES[gate].since()
        return f"Kubernetes 1.{minor} does not have {gate} (1.{since} adds it): {needs}"
    where = f"{gate} is {state.stage} and off by default in Kubernetes 1.{minor}"
    return f"{where}: {needs} unless the gate is on for kube-apiserver and kube-scheduler"


def outside_window(minor: int) -> str | None:
    """Why release ``1.<minor>`` is outside the supported window, or None."""
    if minor in SUPPORTED:
        return None
    why = "past upstream support" if minor < SUPPORTED[0] else "newer than kgpu knows"
    return f"Kubernetes 1.{minor} is outside kgpu's supported window {window()} ({why})"


def support_problem(minor: int) -> str | None:
    """For a server of ``1.<minor>``: why it is outside the window and what kgpu does then
    (the nearest supported release's behaviour), or None."""
    outside = outside_window(minor)
    return None if outside is None else f"{outside}; kgpu behaves as for 1.{nearest(minor)}"


__all__ = [
    "GATES",
    "MODELLED",
    "NEWEST",
    "RELEASES",
    "SUPPORTED",
    "Gate",
    "GateState",
    "Release",
    "gate_off_note",
    "nearest",
    "outside_window",
    "parse_minor",
    "parse_modelled",
    "release",
    "server_release",
    "support_problem",
    "window",
]
