"""--over-budget / WEBHOOK_OVER_BUDGET: what happens to a pod past its namespace's burst budget."""

from __future__ import annotations

import pytest

from webhook.settings import SettingsError, parse_settings


def test_default_leaves_the_pod_local() -> None:
    assert parse_settings([], {}, check_files=False).over_budget == "local"


def test_env_and_flag() -> None:
    assert parse_settings([], {"WEBHOOK_OVER_BUDGET": "deny"}, check_files=False).over_budget == "deny"
    flagged = parse_settings(["--over-budget", "local"], {"WEBHOOK_OVER_BUDGET": "deny"}, check_files=False)
    assert flagged.over_budget == "local"


@pytest.mark.parametrize("value", ["Deny", "reject", "", "remote"])
def test_anything_else_is_reported(value: str) -> None:
    with pytest.raises(SettingsError, match=r"--over-budget: .* is not one of local, deny"):
        parse_settings(["--over-budget", value], {}, check_files=False)
