"""Autoscaling as the real controllers do it, as pure code the simulator drives on its clock.

* :mod:`~kgpu.autoscaling.hpa_spec`, :mod:`~kgpu.autoscaling.replicas`,
  :mod:`~kgpu.autoscaling.hpa`: the ``autoscaling/v2`` HorizontalPodAutoscaler (validation
  and defaults, the replica calculator, the controller's stabilization, behavior policies,
  conditions and events);
* :mod:`~kgpu.autoscaling.keda`: KEDA's ScaledObject with ``prometheus`` triggers (the HPA it
  creates, how a query's result becomes a metric, activation and cooldown);
* :mod:`~kgpu.autoscaling.cluster_autoscaler`: cluster-autoscaler's scale-up and scale-down
  decisions for node groups, with its events.

Each docstring says which upstream behaviour is reproduced and what is not; the tests port
upstream test tables as data.
"""
