"""The pod's side of staging on a real filesystem (entrypoint.local_tree): a walk that never follows a
link out of its tree, and copy-back writes that never go through a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from entrypoint import local_tree, vault_files


def tree_with_bait(tmp_path: Path) -> tuple[Path, Path]:
    secret = tmp_path / "secrets" / "token"
    secret.parent.mkdir()
    secret.write_text("bait")
    data = tmp_path / "ws" / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("alpha")
    (data / "sub" / "b.txt").write_text("beta")
    (data / "inside").symlink_to("sub/b.txt")
    (data / "up-and-back").symlink_to("../data/a.txt")
    (data / "token").symlink_to(secret)
    (data / "secrets").symlink_to(secret.parent)
    (data / "escape").symlink_to("../../secrets/token")
    os.mkfifo(data / "fifo")
    return data, secret


def test_the_walk_stages_inside_links_as_links_and_never_reads_one_that_leads_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data, _secret = tree_with_bait(tmp_path)
    walked = list(local_tree.walk_tree("/ws/data", str(data)))
    assert [d.path for d in walked] == ["/ws/data", "/ws/data/sub"]
    top = {e.name: e for e in walked[0].entries}
    assert sorted(top) == ["a.txt", "inside", "up-and-back"]
    assert (top["inside"].kind, top["inside"].target) == ("link", "sub/b.txt")
    assert (top["a.txt"].kind, top["a.txt"].size) == ("file", 5)
    skipped = [r.__dict__["path"] for r in caplog.records if r.getMessage().startswith("not staging a link")]
    assert sorted(skipped) == ["/ws/data/escape", "/ws/data/secrets", "/ws/data/token"]


def test_a_staged_path_that_is_a_link_is_followed_only_inside_its_directory(tmp_path: Path) -> None:
    data, secret = tree_with_bait(tmp_path)
    # The kubelet's configMap layout: the file is a link into ..data beside it.
    (data / "..2026_11_27").mkdir()
    (data / "..2026_11_27" / "config.yaml").write_text("epochs: 3")
    (data / "..data").symlink_to("..2026_11_27")
    (data / "config.yaml").symlink_to("..data/config.yaml")
    assert local_tree.resolve_root(str(data / "config.yaml")) == str(data / "..2026_11_27" / "config.yaml")
    assert local_tree.resolve_root(str(data / "token")) is None
    with pytest.raises(FileNotFoundError):
        local_tree.resolve_root(str(data / "absent"))
    assert secret.read_text() == "bait"


def test_the_copy_back_never_writes_through_a_link(tmp_path: Path) -> None:
    data, secret = tree_with_bait(tmp_path)
    writer = local_tree.BeneathWriter(str(data))
    try:
        with pytest.raises(local_tree.UnsafePath):
            writer.open_part("secrets/token", resume=False)
        # A link at the file's own name is replaced by the file, never written through.
        fd = writer.open_part("token", resume=False)
        os.write(fd, b"output")
        os.close(fd)
        writer.commit("token", mtime=1_000_000_000)
        fd = writer.open_part("new/dir/file", resume=False)
        os.close(fd)
        writer.commit("new/dir/file", mtime=None)
    finally:
        writer.close()
    assert secret.read_text() == "bait"
    assert not (data / "token").is_symlink() and (data / "token").read_text() == "output"
    assert (data / "token").stat().st_mtime == 1_000_000_000
    assert (data / "new" / "dir" / "file").exists()
    assert not [p for p in data.rglob("*") if vault_files.is_part_name(p.name)]


def test_a_stage_out_path_under_a_link_is_refused(tmp_path: Path) -> None:
    data, _secret = tree_with_bait(tmp_path)
    with pytest.raises(local_tree.UnsafePath, match="symbolic link"):
        local_tree.BeneathWriter(str(data / "secrets" / "out"))
