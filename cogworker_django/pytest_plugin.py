"""pytest fixtures: ``cogworker_fake`` and ``cogworker_inline`` (see testing.py).

def test_signup(cogworker_fake):
    signup("a@example.com")
    assert len(send_welcome.jobs) == 1
"""

from __future__ import annotations

import pytest


@pytest.fixture
def cogworker_fake():
    from cogworker_django import testing

    with testing.fake():
        yield testing


@pytest.fixture
def cogworker_inline():
    from cogworker_django import testing

    with testing.inline():
        yield testing
