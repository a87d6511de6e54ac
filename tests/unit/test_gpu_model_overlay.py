"""The local install's GPU model mapping (devplatform/overlay/gpu-models.yaml) matches the JARVICE
emulator's catalogue: every GPU machine is mapped, under the model its description names, by the
product names NVIDIA GPU feature discovery writes; nothing else is mapped."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from devplatform.emulator.catalogue import default_machines
from tests.support.deadlines import HANG_SECONDS
from webhook import gpu_models

pytestmark = pytest.mark.timeout(HANG_SECONDS)

OVERLAY = Path(__file__).resolve().parents[2] / "devplatform" / "overlay" / "gpu-models.yaml"
# GPU feature discovery's product name -> the model as the catalogue's descriptions write it.
PRODUCTS = {
    "Tesla-T4": "NVIDIA T4",
    "Tesla-V100-SXM2-16GB": "NVIDIA V100",
    "NVIDIA-A100-SXM4-80GB": "NVIDIA A100",
    "Tesla-P100-SXM2-16GB": "NVIDIA P100",
}


def test_the_overlay_maps_each_gpu_machine_of_the_emulator_to_its_model() -> None:
    mapping = gpu_models.parse_model_map(yaml.safe_load(OVERLAY.read_text()), source=str(OVERLAY))
    assert set(mapping.machines) == set(PRODUCTS)
    catalogue = default_machines()
    mapped = {name: model for model, names in mapping.machines.items() for name in names}
    assert set(mapped) == {name for name, fields in catalogue.items() if fields["mc_gpus"] > 0}
    for name, model in mapped.items():
        assert PRODUCTS[model] in catalogue[name]["mc_description"], (name, model)


def test_the_emulator_offers_a_one_gpu_a100() -> None:
    # A 1-GPU pod that selects an A100 may not burst to a bigger machine (the runner's budget check).
    catalogue = default_machines()
    assert any(f["mc_gpus"] == 1 and "A100" in f["mc_description"] for f in catalogue.values())
