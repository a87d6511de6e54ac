"""Run the emulator in-process, on its own event loop in a background thread, for sync tests;
and a small HTTP client for its /_emulator/ controls."""

import asyncio
import threading
from typing import Any

import requests
from aiohttp import web

from devplatform.emulator.config import EmulatorConfig
from devplatform.emulator.server import create_app

START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 15.0


class EmulatorThread:
    """`with EmulatorThread(config) as emu: emu.url` - listening on 127.0.0.1, a free port."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.url = ""
        self._thread = threading.Thread(target=self._main, name="jarvice-emulator", daemon=True)
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        runner = web.AppRunner(create_app(self.config), handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            host, port = runner.addresses[0][:2]
            self.url = f"http://{host}:{port}"
            self._ready.set()
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def start(self) -> "EmulatorThread":
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_SECONDS) or self._error is not None:
            raise RuntimeError(f"emulator did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_TIMEOUT_SECONDS)

    def __enter__(self) -> "EmulatorThread":
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class EmulatorControl:
    """The /_emulator/ endpoints over HTTP (works for in-process and separate-process emulators)."""

    def __init__(self, url: str, *, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.trust_env = False  # loopback: never through a proxy from the environment

    def _get(self, path: str, **params: str) -> Any:
        response = self.session.get(f"{self.url}/_emulator/{path}", params=params, timeout=self.timeout)
        response.raise_for_status()
        return response.json()

    def _post(self, path: str, body: object) -> Any:
        response = self.session.post(f"{self.url}/_emulator/{path}", json=body, timeout=self.timeout)
        response.raise_for_status()
        return response.json()

    def set_faults(self, **faults: Any) -> Any:
        return self._post("faults", faults)

    def faults(self) -> Any:
        return self._get("faults")

    def set_config(self, **config: Any) -> Any:
        return self._post("config", config)

    def reset(self) -> Any:
        return self._post("reset", {})

    def submissions(self, job_label: str | None = None) -> Any:
        return self._get("submissions", **({"job_label": job_label} if job_label else {}))

    def jobs(self, job_label: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._get("jobs", **({"job_label": job_label} if job_label else {}))
        return result

    def stats(self) -> Any:
        return self._get("stats")

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "EmulatorControl":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
