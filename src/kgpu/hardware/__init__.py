"""kgpu.hardware"""
