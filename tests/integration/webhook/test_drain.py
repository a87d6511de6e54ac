"""The preStop hook (/drain): a stopping replica closes each connection after its answer, so the API
server does not keep writing reviews into keep-alive connections this pod is about to close."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from tests.support.clocks import Clock
from tests.support.leases import until
from tests.support.webhook_app import ClientFactory, review_body
from tests.unit.webhook.builders import container, pod
from webhook.app import DRAIN, create_app
from webhook.settings import Settings
from webhook.sync import CacheSync

JSON = {"Content-Type": "application/json"}


async def test_drain_closes_connections_after_each_answer_and_turns_unready(
    aiohttp_client: ClientFactory, settings: Settings, synced: CacheSync, clock: Clock
) -> None:
    quick = dataclasses.replace(settings, drain_seconds=0.3)
    app = create_app(quick, cache=synced.cache, sync=synced, clock=clock)
    client = await aiohttp_client(app)
    before = await client.post("/mutate", data=review_body(pod(container(gpus=1)), uid="a"), headers=JSON)
    assert before.status == 200
    assert before.headers.get("Connection", "").lower() != "close"
    assert (await client.get("/readyz")).status == 200

    hook = asyncio.create_task(client.get("/drain"))
    await until(lambda: app[DRAIN].active)  # the hook has begun
    during: Any = await client.post("/mutate", data=review_body(pod(container(gpus=1)), uid="b"), headers=JSON)
    assert during.status == 200  # still answering while the endpoint goes away
    assert during.headers["Connection"].lower() == "close"
    assert (await client.get("/readyz")).status == 503
    drained = await hook
    assert drained.status == 200  # the hook returns after drain_seconds: then the kubelet sends SIGTERM
