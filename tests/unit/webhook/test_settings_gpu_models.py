"""--gpu-model-label and --gpu-models-file: the mapping is read and checked once, at start, and every
problem in it stops the webhook with what to fix; the shipped files are valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.deadlines import HANG_SECONDS
from webhook import gpu_models
from webhook.settings import SettingsError, parse_settings

pytestmark = pytest.mark.timeout(HANG_SECONDS)

REPO = Path(__file__).resolve().parents[3]


def settings_with(tmp_path: Path, text: str | None, *extra: str):  # type: ignore[no-untyped-def]
    argv = list(extra)
    if text is not None:
        path = tmp_path / "gpu-models.yaml"
        path.write_text(text)
        argv += ["--gpu-models-file", str(path)]
    return parse_settings(argv, {}, check_files=False)


def test_no_file_means_no_mapping_and_the_default_label(tmp_path: Path) -> None:
    policy = settings_with(tmp_path, None).policy
    assert policy.gpu_model_map is None
    assert policy.gpu_model_label == "nvidia.com/gpu.product"


def test_the_mapping_and_label_are_read(tmp_path: Path) -> None:
    text = "# models\nNVIDIA-A100-SXM4-80GB: [ng4a, ng1a]\nTesla-T4:\n  - ng1\n"
    policy = settings_with(tmp_path, text, "--gpu-model-label", "example.com/gpu").policy
    assert policy.gpu_model_map == gpu_models.ModelMap(
        machines={"NVIDIA-A100-SXM4-80GB": ("ng1a", "ng4a"), "Tesla-T4": ("ng1",)}
    )
    assert policy.gpu_model_label == "example.com/gpu"


def test_the_env_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text('{"Tesla-T4": ["ng1"]}')  # JSON is YAML too
    settings = parse_settings([], {"WEBHOOK_GPU_MODELS_FILE": str(path)}, check_files=False)
    assert settings.policy.gpu_model_map == gpu_models.ModelMap(machines={"Tesla-T4": ("ng1",)})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "must be a map of GPU model -> list of JARVICE machine types"),
        ("Tesla-T4: [ng1\n", "is not YAML"),
        ("Tesla-T4: ng1\n", "Tesla-T4: give a non-empty list of JARVICE machine types"),
        ("1080: [ng1]\n", "quote it if YAML reads a number"),
    ],
    ids=["empty", "not-yaml", "not-a-list", "number"],
)
def test_a_bad_mapping_stops_the_webhook_with_what_to_fix(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(SettingsError) as caught:
        settings_with(tmp_path, text)
    (problem,) = caught.value.problems
    assert problem.startswith("--gpu-models-file") and fragment in problem


def test_a_missing_file_says_to_mount_the_configmap(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings(["--gpu-models-file", str(tmp_path / "nope.yaml")], {}, check_files=False)
    assert "mount the nimbix-burst-gpu-models ConfigMap" in str(caught.value)


@pytest.mark.parametrize("label", ["", "has space", "a/b/c", "-lead"], ids=["empty", "space", "two-slashes", "dash"])
def test_a_bad_label_is_refused(tmp_path: Path, label: str) -> None:
    with pytest.raises(SettingsError) as caught:
        settings_with(tmp_path, None, f"--gpu-model-label={label}")
    assert "--gpu-model-label" in str(caught.value)


@pytest.mark.parametrize("path", ["deploy/gpu-models.yaml", "devplatform/overlay/gpu-models.yaml"])
def test_the_shipped_mappings_are_valid(path: str) -> None:
    settings = parse_settings(["--gpu-models-file", str(REPO / path)], {}, check_files=False)
    assert settings.policy.gpu_model_map is not None
