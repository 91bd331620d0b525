"""The kubelet DRA plugin framework: one agent, several DRA drivers (see docs/dra-kubelet.md)."""
