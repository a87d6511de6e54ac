"""The limit: the least an aiohttp TLS webhook can do per request (issue 6 item 1a).

    python -m bench.limit_server --port 8443 --tls-dir DIR

Same stack and TLS setup as the webhook (aiohttp, kubeplumbing.tls.ReloadingTLS's SSLContext, one
process, no access log), but the handler only reads the body and returns a constant allowed
AdmissionReview. Whatever the real webhook costs beyond this is ours. `/admit` is the minimal
webhook the real kube-apiserver can call (uid echoed, one fixed label added), for the pod CREATE
comparison.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from kubeplumbing.tls import ReloadingTLS
from webhook.app import serve

CONSTANT_RESPONSE = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "00000000-0000-4000-8000-000000000000", "allowed": True},
    }
).encode()
# The webhook's default body limit, so both servers accept the same requests.
MAX_BODY_BYTES = 8 * 1024 * 1024


async def mutate(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(body=CONSTANT_RESPONSE, content_type="application/json")


# The minimal webhook the real API server can call (issue 15): it must echo the request's uid, so
# it decodes the review (as the minimal Go webhook does) and adds one fixed label, nothing else.
MINIMAL_PATCH = base64.b64encode(
    json.dumps([{"op": "add", "path": "/metadata/labels/bench.nimbix-burst.io~1minimal", "value": "aiohttp"}]).encode()
).decode()


async def admit(request: web.Request) -> web.Response:
    uid = json.loads(await request.read())["request"]["uid"]
    response = {"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": MINIMAL_PATCH}
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    return web.Response(text=body, content_type="application/json")


async def readyz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def create_app() -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/mutate", mutate)
    app.router.add_post("/admit", admit)
    app.router.add_get("/readyz", readyz)
    return app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.limit_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    tls = ReloadingTLS(args.tls_dir)
    serve(create_app(), host=args.host, port=args.port, ssl_context=tls.context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
