"""Compatibility knowledge, one place per table: what runs with what among NVIDIA drivers, CUDA toolkits, GPUs,
torch wheels, compilers and kernel packages. install.sh, the rules (rules/expr.py's functions), their fixes,
`env` and `build-kernels` all read it here.

    release.py   numeric order of drivers, toolkits, compute capabilities, Pythons; at_or_below, the one lookup
    versions.py  PEP 440 order of package versions (torch nightlies, rcs, local tags); needs packaging
    drivers.py   driver floors per CUDA release (GA) and per CUDA major (minor-version compatibility)
    wheels.py    torch wheels: Python per release, PyPI's CUDA, arch lists, the wheel indexes
    pick.py      the wheel index for a machine (install.sh's `python3 -m olmo_doctor.compat pick`, the fixes)
    gpus.py      GPU name -> compute capability
    nvcc.py      nvcc -> highest GCC, sm targets, TORCH_CUDA_ARCH_LIST parsing, libstdc++ symbol versions
    kernels.py   flash-attn arch tokens, float8 tensor cores, the torchao release for a torch

Every module but versions.py and kernels.py is standard library only: install.sh runs them with whatever
Python it finds, before a venv (or packaging) exists. Nothing is imported here, so that stays true.
"""
