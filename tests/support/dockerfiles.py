"""Reading the webhook's Dockerfile: its stages, their instructions and the numeric user it runs as."""

from __future__ import annotations

import re
import shlex

from devplatform import manifests

DOCKERFILE = manifests.REPO_ROOT / "images" / "webhook" / "Dockerfile"


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """(INSTRUCTION, arguments) per build stage; continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[tuple[str, str]]] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((instruction, " ".join(arguments.split())))
    return stages


def stage_instructions(stage: list[tuple[str, str]], name: str) -> list[str]:
    return [arguments for instruction, arguments in stage if instruction == name]


def dockerfile_user_id() -> int:
    users = stage_instructions(dockerfile_stages()[-1], "USER")
    assert users, "the runtime stage sets no USER (it would run as root)"
    user = shlex.split(users[-1])[0].split(":")[0]
    assert user.isdigit(), "USER must be numeric for runAsNonRoot to verify it"
    return int(user)
