"""Reads the controller's spend record into the cache (I/O): the ConfigMap `nimbix-burst-spend` in the
add-on's namespace, every few seconds, in the background, never while a review waits.

A missing or unreadable record is kept as the reason namespaces with cost caps do not burst
(webhook.spend_ledger); a record that was good stays in use until its age passes the limit.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from kubeplumbing import spendrecord
from webhook.sync import CacheSync

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
READ_TIMEOUT = (5.0, 10.0)


def record_news(previous_problem: str | None, problem: str) -> tuple[int, str] | None:
    """What a read tells the log, given the last read's problem (None: no read yet; "": it was usable):
    the first read either way, then only a change, so an operator sees that caps can work without
    a line every few seconds."""
    if problem == previous_problem:
        return None
    return (logging.WARNING, "spend record unusable") if problem else (logging.INFO, "spend record usable")


class SpendFeed:
    def __init__(self, api_client: Any, sync: CacheSync, *, namespace: str, poll_seconds: float) -> None:
        self._api = kubernetes.client.CoreV1Api(api_client)
        self._sync = sync
        self._namespace = namespace
        self._poll = poll_seconds
        self._last_problem: str | None = None  # none read yet

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.read_once)
            await asyncio.sleep(self._poll)

    def read_once(self) -> None:
        record: spendrecord.SpendRecord | None = None
        problem = ""
        try:
            config_map = self._api.read_namespaced_config_map(
                spendrecord.CONFIGMAP_NAME, self._namespace, _request_timeout=READ_TIMEOUT
            )
            text = (config_map.data or {}).get(spendrecord.RECORD_KEY)
            if text is None:
                problem = f"ConfigMap {self._namespace}/{spendrecord.CONFIGMAP_NAME} has no {spendrecord.RECORD_KEY}"
            else:
                record = spendrecord.parse_spend_record(text)
        except ApiException as exc:
            if exc.status == HTTP_NOT_FOUND:
                problem = (
                    f"ConfigMap {self._namespace}/{spendrecord.CONFIGMAP_NAME} does not exist: the controller writes it"
                    " once it runs with its JARVICE Secret"
                )
            else:
                problem = f"reading ConfigMap {self._namespace}/{spendrecord.CONFIGMAP_NAME}: HTTP {exc.status}"
        except spendrecord.SpendRecordError as exc:
            problem = f"ConfigMap {self._namespace}/{spendrecord.CONFIGMAP_NAME}: {exc}"
        except Exception as exc:  # noqa: BLE001 - any failure: keep the last good record, try again later
            problem = f"reading ConfigMap {self._namespace}/{spendrecord.CONFIGMAP_NAME}: {type(exc).__name__}"
        with self._sync.lock:
            self._sync.cache.spend.set_record(record, problem)
        news = record_news(self._last_problem, problem)
        if news is not None:
            level, message = news
            log.log(level, message, extra={"namespace": self._namespace, "problem": problem})
        self._last_problem = problem
