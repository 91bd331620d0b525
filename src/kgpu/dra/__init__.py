"""kgpu.dra"""
