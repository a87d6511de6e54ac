"""JSONPatch (RFC 6902) as the webhook writes it: an op is a plain dict, a path token is escaped by
RFC 6901. Pure; what a patch holds is built in `webhook.mutation` and `webhook.burst_containers`."""

from __future__ import annotations

from typing import Any

JsonPatchOp = dict[str, Any]


def escape(token: str) -> str:
    """RFC 6901: '~' -> '~0', '/' -> '~1' (resource names contain '/')."""
    return token.replace("~", "~0").replace("/", "~1")
