"""kgpu.sim"""
