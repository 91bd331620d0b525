"""kgpu.kubelet"""
