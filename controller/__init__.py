"""nimbix-burst's burst controller: re-bursts stranded local pods and reaps orphaned JARVICE jobs."""
