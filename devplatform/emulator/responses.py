"""The emulator's answers: JSON and plain-text bodies with JARVICE's bare Content-Types, its error
shape, and Reject, which carries an answer out of a request helper."""

import json
from typing import Final

from aiohttp import web

JSON_TYPE: Final = "application/json"
TEXT_TYPE: Final = "text/plain"


def json_response(obj: object, *, status: int = 200) -> web.Response:
    # Bare Content-Type (no "; charset="): Nimbix's own client rejects anything else.
    return web.Response(body=json.dumps(obj).encode(), status=status, headers={"Content-Type": JSON_TYPE})


def text_response(data: bytes, *, status: int = 200) -> web.Response:
    return web.Response(body=data, status=status, headers={"Content-Type": TEXT_TYPE})


def error(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status=status)


class Reject(Exception):
    """A control-flow signal carrying the response to send."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response
