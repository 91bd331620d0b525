from kgpu.cli import main

main()
