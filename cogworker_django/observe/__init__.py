"""What the worker tells about itself: counters (``stats``), the run log and log
formatting (``runlog``, ``logs``), telemetry and tracing. Nothing here changes what a
job does; a failure here is reported, never raised into a run."""
