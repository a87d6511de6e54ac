"""The house rule on size, in the product's packages (the programs and what they share, as .importlinter's
`house` contract places them): no module over 500 lines, no class over 300. A module past it is split by
what its parts do (a module of its own for a cohesive group, a name that says what it holds)."""

import ast
import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300


def product_packages() -> list[str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    layers = parser["importlinter:contract:house"]["layers"].splitlines()
    return sorted(name.strip() for layer in layers for name in layer.split("|") if name.strip())


def product_modules() -> list[Path]:
    return sorted(path for package in product_packages() for path in (ROOT / package).rglob("*.py"))


def class_sizes(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of every class, nested ones too, from its `class` line to its last."""
    return [
        (node.name, node.lineno, (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    ]


def test_the_product_packages_are_the_house_programs_and_what_they_share() -> None:
    packages = product_packages()
    assert {"webhook", "entrypoint", "controller", "gateway", "jarvice", "kubeplumbing"} <= set(packages)
    assert all((ROOT / package / "__init__.py").is_file() for package in packages)


def test_no_product_module_is_over_500_lines() -> None:
    sizes = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in product_modules()}
    assert len(sizes) > 100  # the whole product was read
    over = sorted((lines, str(path.relative_to(ROOT))) for path, lines in sizes.items() if lines > MAX_MODULE_LINES)
    listed = ", ".join(f"{name} {lines}" for lines, name in over)
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by what their parts do): {listed}"


def test_no_product_class_is_over_300_lines() -> None:
    over = [
        f"{path.relative_to(ROOT)}:{line} {name} {lines}"
        for path in product_modules()
        for name, line, lines in class_sizes(path.read_text(encoding="utf-8"))
        if lines > MAX_CLASS_LINES
    ]
    assert not over, f"classes over {MAX_CLASS_LINES} lines: {', '.join(over)}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("class A:\n    x = 1\n", [("A", 1, 2)]),
        ("\n\nclass A:\n    class B:\n        pass\n    y = 2\n", [("A", 3, 4), ("B", 4, 2)]),
        ("class A:\n" + "    x = 1\n" * 300, [("A", 1, 301)]),
        ("def f():\n    return 1\n", []),
    ],
)
def test_class_sizes_count_from_the_class_line_to_its_last(source: str, expected: list[tuple[str, int, int]]) -> None:
    assert class_sizes(source) == expected
