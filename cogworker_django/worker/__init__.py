"""The run layer: launcher -> manager -> processors, with fetch, heartbeat and poller
beside them (see docs/internals.md)."""
