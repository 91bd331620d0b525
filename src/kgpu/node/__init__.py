"""kgpu.node"""
