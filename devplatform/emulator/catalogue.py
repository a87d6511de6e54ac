"""A realistic /jarvice/machines catalogue: CPU-only and GPU machines, Nimbix-style names.

Values are illustrative (the shape is the documented one: mc_cores, mc_gpus, mc_ram in GB,
mc_slave_gpus, mc_scale_min/max, mc_description, mc_price per hour, mc_arch).
"""

from typing import Any


def _machine(
    *, cores: int, gpus: int, ram: int, price: float, description: str, scale_max: int = 1, arch: str = "x86_64"
) -> dict[str, Any]:
    return {
        "mc_cores": cores,
        "mc_gpus": gpus,
        "mc_ram": ram,
        "mc_slave_gpus": gpus,
        "mc_slave_ram": ram,
        "mc_scale_min": 1,
        "mc_scale_max": scale_max,
        "mc_scale_select": "",
        "mc_description": description,
        "mc_price": price,
        "mc_arch": arch,
        "mc_swap": 0,
    }


def default_machines() -> dict[str, dict[str, Any]]:
    return {
        "n0": _machine(cores=4, gpus=0, ram=16, price=0.35, description="4 core, 16GB RAM (CPU only)"),
        "n1": _machine(cores=8, gpus=0, ram=32, price=0.70, description="8 core, 32GB RAM (CPU only)", scale_max=8),
        "n3": _machine(cores=16, gpus=0, ram=64, price=1.40, description="16 core, 64GB RAM (CPU only)", scale_max=32),
        "n5": _machine(cores=32, gpus=0, ram=256, price=2.90, description="32 core, 256GB RAM (CPU only)"),
        # GPU machines that scale past one node take multi-node (gang) jobs.
        "ng1": _machine(cores=8, gpus=1, ram=64, price=2.10, description="8 core, 64GB RAM, 1x NVIDIA T4", scale_max=8),
        "ng2": _machine(
            cores=16, gpus=2, ram=128, price=4.20, description="16 core, 128GB RAM, 2x NVIDIA V100", scale_max=8
        ),
        "ng4": _machine(
            cores=32, gpus=4, ram=256, price=8.40, description="32 core, 256GB RAM, 4x NVIDIA V100", scale_max=8
        ),
        # A second 4-GPU V100 machine, dearer than ng4: where a 4-GPU V100 pod moves when ng4 is full.
        "ng4v": _machine(
            cores=48, gpus=4, ram=384, price=10.20, description="48 core, 384GB RAM, 4x NVIDIA V100", scale_max=8
        ),
        # One A100: the smallest machine a 1-GPU pod that selects an A100 may burst to (the budget check
        # refuses a machine with more GPUs than the pod asked for).
        "ng1a": _machine(cores=16, gpus=1, ram=128, price=3.20, description="16 core, 128GB RAM, 1x NVIDIA A100 80GB"),
        "ng4a": _machine(cores=32, gpus=4, ram=512, price=12.80, description="32 core, 512GB RAM, 4x NVIDIA A100"),
        "ng8": _machine(cores=64, gpus=8, ram=1024, price=25.60, description="64 core, 1TB RAM, 8x NVIDIA A100"),
        "np8g4": _machine(cores=160, gpus=4, ram=512, price=9.00, description="POWER8, 4x NVIDIA P100", arch="ppc64le"),
    }
