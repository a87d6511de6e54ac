"""The remote-burst runner (`python -m entrypoint`)."""
