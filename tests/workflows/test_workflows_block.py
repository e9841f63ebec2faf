"""A batch's callbacks wait while its ``with Batch()`` block is open: members may finish
before the block closes (a worker is fast, the block slow), and the callbacks fire when
it closes, once (lua/batch_update.lua's "close")."""

from __future__ import annotations

from testapp import jobs as tj

from cogworker_django import Batch, api
from cogworker_django.store import keys

from .test_workflows_batches import queued, run_in_worker


def test_callbacks_wait_for_the_block_even_when_every_member_is_done(r, prefix):
    with Batch(on_success=tj.wf_callback.s("ok"), on_complete=tj.wf_callback.s("done")) as b:
        tj.wf_member.enqueue("a")
        (a,) = queued(r)
        r.delete(keys.queue("default"))
        assert run_in_worker(a) == "ok"  # the only member, done inside the block
        assert queued(r) == []  # the block is open: nothing fired
        assert api.Batches().get(b.bid).state == "open"
    fired = queued(r)
    assert sorted(j["callback_event"] for j in fired) == ["complete", "success"]
    assert api.Batches().get(b.bid).state == "succeeded"
