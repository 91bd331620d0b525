"""kgpu.cluster"""
