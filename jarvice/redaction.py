"""Keep the JARVICE API key out of anything printed: a `Secret` hides it in repr/str, `redact` masks it
in text. Pure.

The key travels in query strings (`apikey=...`) and in submit bodies (`"apikey": "..."`), so both
shapes are masked, and so is the literal key wherever it appears (e.g. echoed back by a server).
"""

import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import Final

MASK: Final = "***"
# Shorter literals are not masked on their own: replacing "a" everywhere would mangle text while
# protecting nothing (the query-string and JSON patterns still apply).
MIN_LITERAL: Final = 4
_QUERY_RE: Final = re.compile(r"(?i)(apikey=)[^&\s'\"]*")
_JSON_RE: Final = re.compile(r'(?i)("apikey"\s*:\s*")(?:[^"\\]|\\.)*(")')
_REPR_RE: Final = re.compile(r"(?i)('apikey'\s*:\s*')(?:[^'\\]|\\.)*(')")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    result = _QUERY_RE.sub(lambda m: m.group(1) + MASK, text)
    result = _JSON_RE.sub(lambda m: m.group(1) + MASK + m.group(2), result)
    result = _REPR_RE.sub(lambda m: m.group(1) + MASK + m.group(2), result)
    for secret in secrets:
        if len(secret) < MIN_LITERAL:
            continue
        forms = {
            secret,
            json.dumps(secret)[1:-1],
            json.dumps(secret, ensure_ascii=False)[1:-1],
            urllib.parse.quote(secret, safe=""),
            urllib.parse.quote_plus(secret),
        }
        for form in sorted(forms, key=len, reverse=True):
            result = result.replace(form, MASK)
    return result


class Secret:
    """A string that does not show itself in repr/str (settings get logged; keys must not)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)
