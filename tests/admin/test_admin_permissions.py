"""Permissions of the admin pages: anonymous users get the login page, staff without
the model's view permission 403, view-only users can look but not act, change permits
retry/pause/disable/quiet and delete permits delete/clear."""

import time

import pytest
from django.test import Client

from cogworker_django.api import DeadSet
from cogworker_django.store import keys

from ..admin_support import PAGES, fast_passwords_fixture, post, staff_client_fixture, url  # noqa: F401
from ..api_support import add_to, make_job, push

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", PAGES)
def test_anonymous_gets_the_login_page(model):
    response = Client().get(url(model))
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


def test_logged_in_non_staff_gets_the_login_page(django_user_model):
    user = django_user_model.objects.create_user("customer")
    client = Client()
    client.force_login(user)
    response = client.get(url("deadjob"))
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_anonymous_action_does_nothing(r):
    push(r, make_job())
    response = Client().post(
        url("queue", "action"), {"action": "clear", "name": "default", "confirmed": "yes"}
    )
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert r.llen(keys.queue("default")) == 1


def test_staff_without_permissions_gets_403_everywhere(staff_client, r):
    client = staff_client()
    for model in PAGES:
        assert client.get(url(model)).status_code == 403, model
    assert client.get(url("queue", "jobs"), {"name": "default"}).status_code == 403
    assert client.get(url("deadjob", "job"), {"key": "1.0|ab"}).status_code == 403
    assert client.get(url("quarantinedkey", "preview"), {"key": "x"}).status_code == 403
    add_to(r, "dead", make_job())
    assert post(client, "deadjob", "delete", key=DeadSet().page()[0].key).status_code == 403
    assert DeadSet().size() == 1
    # The Cogworker section is not listed for them.
    assert "Cogworker" not in client.get("/admin/").content.decode()


def test_view_permission_shows_one_page_without_action_controls(staff_client, r):
    client = staff_client("view_deadjob")
    add_to(r, "dead", make_job())
    html = client.get(url("deadjob")).content.decode()
    assert 'name="key"' not in html and "Retry all" not in html and "Delete all" not in html
    assert client.get(url("retryjob")).status_code == 403
    key = DeadSet().page()[0].key
    for action in ("retry", "delete", "retry_all", "delete_all"):
        assert post(client, "deadjob", action, key=key, confirmed="yes").status_code == 403
    assert DeadSet().size() == 1
    index = client.get("/admin/").content.decode()
    assert "Cogworker" in index and ">Dead</a>" in index and ">Retries</a>" not in index


def test_change_permission_retries_but_does_not_delete(staff_client, r):
    client = staff_client("view_deadjob", "change_deadjob")
    for i in range(2):
        add_to(r, "dead", make_job(token=i), time.time() + i)
    html = client.get(url("deadjob")).content.decode()
    assert "Retry all" in html and "Delete all" not in html
    assert '<option value="delete">' not in html and '<option value="retry">' in html
    first, second = DeadSet().page()
    assert post(client, "deadjob", "delete", key=first.key).status_code == 403
    assert post(client, "deadjob", "delete_all", confirmed="yes").status_code == 403
    assert post(client, "deadjob", "retry", key=first.key).status_code == 302
    assert DeadSet().size() == 1


def test_delete_permission_deletes_but_does_not_retry(staff_client, r):
    client = staff_client("view_deadjob", "delete_deadjob")
    add_to(r, "dead", make_job())
    key = DeadSet().page()[0].key
    assert post(client, "deadjob", "retry", key=key).status_code == 403
    assert post(client, "deadjob", "delete", key=key).status_code == 302
    assert DeadSet().size() == 0


def test_queue_permissions(staff_client, r):
    push(r, make_job())
    viewer = staff_client("view_queue")
    html = viewer.get(url("queue")).content.decode()
    assert 'data-action="pause"' not in html and 'data-action="clear"' not in html
    assert post(viewer, "queue", "pause", name="default").status_code == 403
    changer = staff_client("view_queue", "change_queue")
    assert post(changer, "queue", "pause", name="default").status_code == 302
    assert post(changer, "queue", "clear", name="default", confirmed="yes").status_code == 403
    assert r.llen(keys.queue("default")) == 1
    deleter = staff_client("view_queue", "delete_queue")
    assert post(deleter, "queue", "resume", name="default").status_code == 403
    assert post(deleter, "queue", "clear", name="default", confirmed="yes").status_code == 302
    assert r.llen(keys.queue("default")) == 0


def test_process_and_periodic_and_quarantine_permissions(staff_client):
    viewer = staff_client("view_process", "view_periodicentry", "view_quarantinedkey")
    assert post(viewer, "process", "quiet", identity="x").status_code == 403
    assert post(viewer, "process", "stop", identity="x").status_code == 403
    for action in ("disable", "enable", "run_now"):
        assert post(viewer, "periodicentry", action, name="x").status_code == 403
    assert post(viewer, "quarantinedkey", "delete", key="x").status_code == 403
    changer = staff_client("view_process", "change_process")
    assert post(changer, "process", "quiet", identity="x").status_code == 302


def test_read_only_pages_have_only_view_permission():
    from django.contrib.auth.models import Permission

    codenames = set(
        Permission.objects.filter(content_type__app_label="cogworker_django").values_list(
            "codename", flat=True
        )
    )
    assert {"view_dashboard", "view_busyjob", "view_jobrun"} <= codenames
    assert not {"change_dashboard", "delete_busyjob", "add_queue", "delete_process"} & codenames
    assert {
        "change_queue",
        "delete_queue",
        "change_deadjob",
        "delete_deadjob",
        "change_periodicentry",
        "delete_quarantinedkey",
    } <= codenames
