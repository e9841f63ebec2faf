"""The run layer: launcher -> manager -> processors, with fetch, heartbeat and poller
beside them (see DESIGN.md section 1)."""
