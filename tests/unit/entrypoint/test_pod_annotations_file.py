"""The runner finds the pod's annotations (the controller's move-home mark, the checkpoint directory) in
the file NIMBIX_BURST_POD_ANNOTATIONS_FILE names, whichever way the pod pays."""

from pathlib import Path

import pytest

from entrypoint import ports
from entrypoint.__main__ import move_mark_reader, pod_annotations
from entrypoint.settings import Settings, SettingsError, parse_settings
from jarvice import contract
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

REMOTE = {
    "REMOTE": "1",
    "JARVICE_USERNAME": "alice",
    "JARVICE_APIKEY": "k3y-XYZ-123456",
    "APP_NAME": "my-app",
    "APP_COMMAND_ARGS": "echo hi",
}


def parse(env: dict[str, str]) -> Settings:
    def no_files(path: str) -> str:
        raise FileNotFoundError(2, "No such file or directory", path)

    return parse_settings(env, argv=(), read_file=no_files, hostname="host-1")


def test_the_file_is_a_setting_and_unset_means_no_move_home() -> None:
    assert parse(REMOTE).pod_annotations_file is None
    path = "/var/run/nimbix-burst-pod/pod-annotations"
    assert parse({**REMOTE, contract.ENV_POD_ANNOTATIONS_FILE: path}).pod_annotations_file == path


def test_a_relative_path_is_refused_saying_what_to_fix() -> None:
    with pytest.raises(SettingsError) as info:
        parse({**REMOTE, contract.ENV_POD_ANNOTATIONS_FILE: "pod-annotations"})
    assert any(
        f"{contract.ENV_POD_ANNOTATIONS_FILE} must be an absolute path" in problem for problem in info.value.problems
    )


def test_the_mark_is_read_afresh_at_each_look(tmp_path: Path) -> None:
    """The kubelet rewrites the file when the controller marks the pod: each poll reads it again."""
    path = tmp_path / "pod-annotations"
    path.write_text('nimbix-burst.io/checkpoint-dir="/w/ckpt"\n')
    read_mark = move_mark_reader(str(path))
    assert read_mark() is None
    path.write_text(f'nimbix-burst.io/checkpoint-dir="/w/ckpt"\n{contract.ANNOTATION_MOVE_HOME}="4711"\n')
    assert read_mark() == 4711
    assert pod_annotations(str(path))["nimbix-burst.io/checkpoint-dir"] == "/w/ckpt"


def test_without_the_file_no_move_home_is_asked(tmp_path: Path) -> None:
    assert move_mark_reader(None) is ports.no_move_mark
    assert pod_annotations(None) == {}
    assert pod_annotations(str(tmp_path / "missing")) == {}
    assert move_mark_reader(str(tmp_path / "missing"))() is None
