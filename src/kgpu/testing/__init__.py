"""kgpu.testing"""
