"""Benchmarks for the nimbix-burst webhook (`make bench`, or `python -m bench`).

Pure pieces (cluster generators, review bodies, statistics, the report) are importable on their
own; everything that starts a process or opens a socket lives in the runner modules and stops what
it started by PID.
"""
