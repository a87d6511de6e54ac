"""The import contracts are an allow-list only while they name every first-party package: a package
that no contract names could be imported by any program unnoticed. .importlinter's `house` places the
programs and what they share; `product-independent-of-platform` keeps the product off the tools."""

import configparser
from pathlib import Path

import pytest

from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

ROOT = Path(__file__).resolve().parents[2]


def contracts() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    return parser


def listed(section: configparser.SectionProxy, key: str) -> list[str]:
    return [line.strip() for line in section[key].splitlines() if line.strip()]


def house_packages() -> set[str]:
    layers = listed(contracts()["importlinter:contract:house"], "layers")
    return {name.strip() for layer in layers for name in layer.split("|")}


def test_every_package_of_the_tree_is_a_root_package() -> None:
    tree = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests"}
    assert tree == set(listed(contracts()["importlinter"], "root_packages"))


def test_every_root_package_is_in_the_house_or_a_tool_the_product_may_not_import() -> None:
    parser = contracts()
    platform = parser["importlinter:contract:product-independent-of-platform"]
    roots = set(listed(parser["importlinter"], "root_packages"))
    tools = set(listed(platform, "forbidden_modules"))
    assert house_packages() | tools == roots
    assert not house_packages() & tools
    # The whole house is the product: every package of it is kept off the tools.
    assert set(listed(platform, "source_modules")) == house_packages()


def test_the_programs_stand_side_by_side_over_jarvice_and_kubeplumbing() -> None:
    layers = listed(contracts()["importlinter:contract:house"], "layers")
    split = [{name.strip() for name in layer.split("|")} for layer in layers]
    assert split == [{"webhook", "entrypoint", "controller", "kubectl_nimbix", "gateway"}, {"jarvice", "kubeplumbing"}]
    assert all("|" in layer and ":" not in layer for layer in layers), "siblings of a layer stay independent"
