"""kgpu.metrics"""
