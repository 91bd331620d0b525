"""kgpu.computedomain"""
