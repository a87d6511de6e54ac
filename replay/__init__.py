"""What-if replay of a GPU cluster trace through the real stack (`make replay`; see docs/replay.md)."""
