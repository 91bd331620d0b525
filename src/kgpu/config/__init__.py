"""kgpu.config"""
