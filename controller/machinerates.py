"""One cached listing of the JARVICE machines' rates for every loop that costs jobs (I/O shell around
`controller.pricing`).

The loops run in their own worker threads: the listing is taken under a lock, on a JARVICE client
of its own (a requests session is not shared across threads). A failed listing keeps the last one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping

from controller.pricing import Rate, needs_listing, rates_of
from jarvice.client import JarviceError
from jarvice.model import Machine

log = logging.getLogger(__name__)

# A machine a job names that is not in the listing (or an empty listing) is looked for again at most
# this often.
UNKNOWN_MACHINE_RETRY_SECONDS = 60.0


class MachineRates:
    def __init__(
        self,
        *,
        fetch: Callable[[], Mapping[str, Machine]],
        refresh: float,
        clock: Callable[[], float],
        on_error: Callable[[], None],
        retry: float = UNKNOWN_MACHINE_RETRY_SECONDS,
    ) -> None:
        self._fetch = fetch
        self._refresh = refresh
        self._retry = retry
        self._clock = clock
        self._on_error = on_error
        self._lock = threading.Lock()
        self._rates: Mapping[str, Rate] = {}
        self._listed_at: float | None = None

    def current(self, *, named: Collection[str] = ()) -> Mapping[str, Rate]:
        """The rates, listed again when stale or when `named` (the machines jobs name) lacks one."""
        with self._lock:
            now = self._clock()
            age = None if self._listed_at is None else now - self._listed_at
            if not needs_listing(age, known=self._rates.keys(), named=named, refresh=self._refresh, retry=self._retry):
                return self._rates
            self._listed_at = now
            try:
                machines = self._fetch()
            except JarviceError as exc:
                self._on_error()
                log.warning("JARVICE machines not listed", extra={"error": str(exc)})
                return self._rates
            self._rates = rates_of(machines)
            log.info("JARVICE machines listed", extra={"count": len(self._rates)})
            return self._rates
