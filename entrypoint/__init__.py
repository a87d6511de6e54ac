"""The remote-burst runner (`python -m entrypoint`)."""

from importlib import metadata

try:
    # One source of truth: the version in pyproject.toml, as installed.
    __version__ = metadata.version("nimbix-burst")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
