"""The emulator's vault rules that need no server: vault options, names, and /jarvice/vault's listing."""

from pathlib import Path

import pytest

from devplatform.emulator import vault


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        pytest.param([], {"drop.jarvice.com": "filesystem"}, id="default-only"),
        pytest.param(["objects=object"], {"drop.jarvice.com": "filesystem", "objects": "object"}, id="object"),
        pytest.param(["drop.jarvice.com=object"], {"drop.jarvice.com": "object"}, id="default-as-object"),
    ],
)
def test_parse_vault_kinds(items: list[str], expected: dict[str, str]) -> None:
    assert vault.parse_vault_kinds(items) == expected


@pytest.mark.parametrize("item", ["objects", "=object", "a/b=object", "x=s3"])
def test_parse_vault_kinds_rejects(item: str) -> None:
    with pytest.raises(ValueError, match="NAME=filesystem or NAME=object"):
        vault.parse_vault_kinds([item])


@pytest.mark.parametrize(("username", "name"), [("alice", "../x"), ("..", "v"), ("alice", ""), ("a/b", "v")])
def test_vault_dir_refuses_names_that_leave_the_root(tmp_path: Path, username: str, name: str) -> None:
    with pytest.raises(ValueError):
        vault.vault_dir(vault.VaultConfig(root=tmp_path), username=username, name=name)


def test_listing_is_jarvice_s_shape(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "big").write_bytes(b"x" * 10)
    (tmp_path / "small").write_bytes(b"x")
    rows = vault.list_vault(tmp_path, "/", details=True, sort="S")
    assert rows is not None
    files = [row for row in rows if not row[0].endswith("/")]  # a directory's size depends on the file system
    assert [row[:2] for row in files] == [["big", 10], ["small", 1]]  # "S": by size, largest first
    assert [row[:2] for row in vault.list_vault(tmp_path, "/", details=False, sort="n") or []] == [
        ["big", 0],
        ["d/", 0],
        ["small", 0],
    ]
    assert vault.list_vault(tmp_path, "/../..", details=False, sort="n") is None
    assert vault.list_vault(tmp_path, "/absent", details=False, sort="n") is None
