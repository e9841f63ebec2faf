"""The enqueue side's plugins (core/enqueue_plugins.py): the job core asks the list it was
given, imports none of the features, and a plugin takes part in every enqueue path."""

import ast
import contextlib
import json
from pathlib import Path

import pytest
from testapp import jobs as tj

from cogworker_django.core import enqueue_builtin, enqueue_plugins, jobs
from cogworker_django.store import keys
from cogworker_django.store.errors import CogworkerError


@contextlib.contextmanager
def plugins(*extra):
    enqueue_plugins.install_enqueue_plugins((*enqueue_builtin.builtin(), *extra))
    try:
        yield
    finally:
        enqueue_plugins.install_enqueue_plugins(enqueue_builtin.builtin())


class Stamp(enqueue_plugins.EnqueuePlugin):
    name = "Stamp"

    def __init__(self):
        self.checked = []

    def check_options(self, where, opts):
        self.checked.append(where)
        if opts.get("queue") == "refused":
            raise ValueError(f"{where}: refused by Stamp")

    def payload_fields(self, opts, now, at):
        return {"stamped_at": now}

    def job_fields(self, path, args, kwargs, opts, fields):
        fields["arg_count"] = len(args)


def test_the_job_core_imports_none_of_the_features():
    # Not even inside a function: it asks the installed list (docs/internals.md).
    tree = ast.parse(Path(jobs.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            imported |= {f"{node.module or ''}.{a.name}".lstrip(".") for a in node.names}
            imported.add(node.module or "")
    features = {"controls", "workflows", "durable", "unique", "enqueue_builtin"}
    assert {name for name in imported for f in features if f in name.split(".")} == set()


def test_the_builtin_list_is_installed_in_order():
    names = [p.name for p in enqueue_plugins.current().plugins]
    assert names == ["Options", "Unique", "Workflows", "Durable"]


def test_a_part_keeps_only_the_plugins_that_give_it():
    table = enqueue_plugins.Table(enqueue_builtin.builtin())
    assert len(table.checks) == 1 and len(table.fields) == 1  # Options
    assert len(table.job_fields) == 1  # Unique
    assert len(table.joins) == 1 and len(table.plain_checks) == 1  # Workflows
    assert table.durable is not None and table.durable.name == "Durable"
    assert table.signer is not None and table.signer.name == "Workflows"


def test_an_answer_given_by_two_plugins_is_refused():
    with pytest.raises(CogworkerError, match="durable_enqueue is given by"):
        enqueue_plugins.Table((*enqueue_builtin.builtin(), enqueue_builtin.Durable()))


def test_without_a_durable_plugin_a_durable_enqueue_says_so():
    table = enqueue_plugins.Table((enqueue_builtin.Options(),))
    with pytest.raises(CogworkerError, match="durable enqueue needs"):
        table.durable_writer()


def test_a_plugin_takes_part_in_checks_and_payloads():
    stamp = Stamp()
    with plugins(stamp):
        job = tj.takes_anything.using(queue="low", timeout=5)._build((1, 2), {})
        assert job["arg_count"] == 2 and job["stamped_at"] == job["enqueued_at"]
        assert job["timeout"] == 5  # the built-ins' fields are still merged in
        assert stamp.checked == [f"{tj.takes_anything.path}.using()"]
        with pytest.raises(ValueError, match="refused by Stamp"):
            tj.takes_anything.using(queue="refused")
    job = tj.takes_anything._build((1,), {})
    assert "stamped_at" not in job and "arg_count" not in job


def test_a_plugin_with_fields_sends_a_bulk_through_the_general_path(r):
    with plugins(Stamp()):
        tj.takes_anything.using(queue="stamped").enqueue_many([(1,), (2, 3)])
    texts = r.lrange(keys.queue("stamped"), 0, -1)[::-1]  # LPUSH: oldest last
    assert [json.loads(t)["arg_count"] for t in texts] == [1, 2]
