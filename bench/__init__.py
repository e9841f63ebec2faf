"""Throughput benchmark: cogworker_django against RQ, Dramatiq, Huey and Celery.

Run ``python -m bench --help`` from the repository root; ``bench/README.md`` says what
is measured and how each peer is configured.
"""
