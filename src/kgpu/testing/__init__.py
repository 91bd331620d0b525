"""Fakes users (and kgpu's tests) can test against, each standing in for a part that cannot
run here: a kubelet for device plugins (:class:`FakeKubelet`) and for DRA plugins
(:class:`FakeDraKubelet`), its PodResources API (:class:`FakePodResourcesServer`), a node
agent in a child process (:class:`AgentProcess`), node views built from made-up machines
(``views``), and the manifests tests and benches apply (``manifests.deployment``)."""

from kgpu.testing.agent_process import AgentProcess
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.fake_kubelet_dra import FakeDraKubelet
from kgpu.testing.fake_podresources import FakePodResourcesServer
from kgpu.testing.views import make_machine, make_view

__all__ = [
    "AgentProcess",
    "FakeDraKubelet",
    "FakeKubelet",
    "FakePodResourcesServer",
    "make_machine",
    "make_view",
]
