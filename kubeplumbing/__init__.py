"""The Kubernetes plumbing that the webhook and the burst controller share, and that imports neither:

- `leadership` (pure): the Lease election's rules, and the handover a releasing leader leaves;
- `lease`: the election loop over one coordination.k8s.io Lease;
- `watching`: the API client, and one list-then-watch loop (re-list on 410, backoff, bookmarks);
- `background`: tasks that live as long as an aiohttp application, and stop the process if they crash;
- `logs`: the JSON log lines both programs write;
- `options` (pure): command-line options with environment defaults, and the checks of their values.
"""
