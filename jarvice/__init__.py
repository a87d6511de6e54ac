"""What the runner, the webhook and the controller share about Nimbix JARVICE, and that imports none of them:

- `client`: the HTTP adapter (timeouts, retries, the API key kept out of errors); `wire` (pure): its
  errors, and JARVICE's answers checked and converted to `model` values;
- `model` (pure): jobs, machines, statuses and the submit body, as plain values;
- `labels` (pure): the job label a runner submits under, built and parsed;
- `duplicates` (pure): the one-job-per-label rule the runner and the reaper both keep;
- `exitcodes` (pure): a job's end as a process exit status, and the runner's own failure codes;
- `redaction` (pure): the API key as a `Secret`, and masked wherever text is printed;
- `contract` (pure): the names the webhook writes onto a pod and the runner and the controller read.
"""

from importlib import metadata

try:
    # One source of truth: the version in pyproject.toml, as installed.
    __version__ = metadata.version("nimbix-burst")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
