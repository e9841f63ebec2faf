"""The Periodic schedule page's database entries through Django's test client: the form
validates as COGWORKER_PERIODIC is validated (a "did you mean" for a mistyped job, the
next fire times), add / change / disable / delete land in the admin log and bump the
version key the workers read, both sources are listed, the model's permissions apply
(a group that had the page's old rights keeps them), and the preview of fire times."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command

from cogworker_django.models import PeriodicEntry
from cogworker_django.store import keys

from ..admin_support import (  # noqa: F401 - autouse fixture
    fast_passwords_fixture,
    messages_of,
    post,
    staff_client_fixture,
    url,
)

pytestmark = pytest.mark.django_db

FORM = {
    "name": "nightly",
    "description": "the nightly report",
    "enabled": "on",
    "cron": "0 3 * * *",
    "timezone": "Europe/Paris",
    "job": "testapp.jobs.periodic_note",
    "args": "[1]",
    "kwargs": '{"lang": "fr"}',
    "queue": "",
    "unique": "",
}


def version(r) -> int:
    return int(r.get(keys.periodic_version()) or 0)


def errors_of(response) -> dict[str, list[str]]:
    form = response.context["adminform"].form
    return {k: [str(e) for e in v] for k, v in form.errors.items()}


def test_the_form_validates_as_the_settings_are(admin_client, settings):
    settings.COGWORKER_PERIODIC = {"taken": {"cron": "* * * * *", "job": "testapp.jobs.noop"}}
    add = url("periodicentry", "add")
    response = admin_client.post(add, {**FORM, "job": "testapp.jobs.periodic_not"})
    assert response.status_code == 200
    (job_error,) = errors_of(response)["job"]
    assert "did you mean 'testapp.jobs.periodic_note'?" in job_error
    bad = {
        **FORM,
        "name": "taken",
        "cron": "0 25 * * *",
        "timezone": "Europe/Pariss",
        "job": "testapp.jobs.periodic_span",
        "args": "[1, 2, 3]",
        "kwargs": "{}",
    }
    found = errors_of(admin_client.post(add, bad))
    assert "COGWORKER_PERIODIC" in found["name"][0]
    assert "not a known time zone" in found["timezone"][0].lower()
    assert set(found) >= {"name", "timezone", "cron"}
    bad_args = errors_of(
        admin_client.post(add, {**FORM, "job": "testapp.jobs.periodic_span", "args": "[1, 2, 3]"})
    )
    assert "does not take these arguments" in bad_args["args"][0]
    assert (
        "Expected a list"
        in errors_of(admin_client.post(add, {**FORM, "args": '{"a": 1}'}))["args"][0]
    )
    assert (
        "without whitespace"
        in errors_of(admin_client.post(add, {**FORM, "name": "two words"}))["name"][0]
    )
    assert not PeriodicEntry.objects.exists()


@pytest.mark.django_db(transaction=True)  # the version is bumped once the save commits
def test_add_change_disable_delete_are_logged_and_bump_the_version(admin_client, admin_user, r):
    before = version(r)
    response = admin_client.post(url("periodicentry", "add"), FORM)
    assert response.status_code == 302 and response.url == url("periodicentry")
    row = PeriodicEntry.objects.get(name="nightly")
    assert (row.args, row.kwargs, row.timezone, row.changed_at is not None) == (
        [1],
        {"lang": "fr"},
        "Europe/Paris",
        True,
    )
    assert version(r) == before + 1
    from django.urls import reverse

    change = reverse("admin:cogworker_django_periodicentry_change", args=[row.pk])
    page = admin_client.get(change).content.decode()
    assert 'class="cw-fire-times"' in page
    assert "03:00:00 CET" in page or "03:00:00 CEST" in page
    admin_client.post(change, {**FORM, "args": "[2]"})
    assert PeriodicEntry.objects.get(pk=row.pk).args == [2]
    assert version(r) == before + 2
    response = post(admin_client, "periodicentry", "disable", name="nightly")
    assert response.status_code == 302
    assert not PeriodicEntry.objects.get(pk=row.pk).enabled and version(r) == before + 3
    post(admin_client, "periodicentry", "enable", name="nightly")
    assert PeriodicEntry.objects.get(pk=row.pk).enabled and version(r) == before + 4
    delete = reverse("admin:cogworker_django_periodicentry_delete", args=[row.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not PeriodicEntry.objects.exists() and version(r) == before + 5
    log = list(LogEntry.objects.filter(object_id=str(row.pk)).order_by("id"))
    assert [e.action_flag for e in log] == [ADDITION, CHANGE, CHANGE, CHANGE, DELETION]
    assert all(e.user_id == admin_user.pk for e in log)
    assert "Disabled." in log[2].get_change_message()


def test_the_page_lists_both_sources(admin_client, settings, r):
    settings.COGWORKER_PERIODIC = {
        "from-settings": {"cron": "*/5 * * * *", "job": "testapp.jobs.periodic_tick"}
    }
    admin_client.post(url("periodicentry", "add"), FORM)
    PeriodicEntry.objects.create(name="broken", cron="* * * * *", job="testapp.jobs.gone")
    html = admin_client.get(url("periodicentry")).content.decode()
    settings_row = html.split('data-entry="from-settings"', 1)[1].split("</tr>", 1)[0]
    assert (
        'data-source="settings"' in settings_row and "<a href" not in settings_row.split("</th>")[0]
    )
    db_row = html.split('data-entry="nightly"', 1)[1].split("</tr>", 1)[0]
    assert 'data-source="database"' in db_row and "/change/" in db_row
    assert "the nightly report" in db_row and 'data-action="disable"' in db_row
    broken = html.split('data-entry="broken"', 1)[1].split("</tr>", 1)[0]
    assert "not run" in broken and "not a registered @job" in broken
    assert 'data-action="run_now"' not in broken
    assert 'class="addlink"' in html


def test_run_now_of_a_database_entry(admin_client, r):
    admin_client.post(url("periodicentry", "add"), FORM)
    response = post(admin_client, "periodicentry", "run_now", name="nightly")
    assert response.status_code == 302
    (raw,) = r.lrange(keys.queue("default"), 0, -1)
    job = json.loads(raw)
    assert (job["func"], job["args"], job["kwargs"], job["periodic"]) == (
        "testapp.jobs.periodic_note",
        [1],
        {"lang": "fr"},
        "nightly",
    )


def test_the_models_permissions_apply(staff_client):
    PeriodicEntry.objects.create(name="e", cron="* * * * *", job="testapp.jobs.periodic_note")
    from django.urls import reverse

    row = PeriodicEntry.objects.get()
    change = reverse("admin:cogworker_django_periodicentry_change", args=[row.pk])
    delete = reverse("admin:cogworker_django_periodicentry_delete", args=[row.pk])
    # The page's rights before entries could be stored: look, edit and act; no add/delete.
    editor = staff_client("view_periodicentry", "change_periodicentry")
    assert editor.get(url("periodicentry")).status_code == 200
    assert editor.get(url("periodicentry", "add")).status_code == 403
    assert editor.post(delete, {"post": "yes"}).status_code == 403
    assert editor.post(change, {**FORM, "name": "e"}).status_code == 302
    viewer = staff_client("view_periodicentry")
    assert viewer.post(change, {**FORM, "name": "e2"}).status_code == 403
    assert post(viewer, "periodicentry", "disable", name="e").status_code == 403
    assert PeriodicEntry.objects.get().name == "e"
    adder = staff_client("view_periodicentry", "add_periodicentry", "delete_periodicentry")
    assert adder.post(url("periodicentry", "add"), {**FORM, "name": "new"}).status_code == 302
    assert adder.post(delete, {"post": "yes"}).status_code == 302
    assert list(PeriodicEntry.objects.values_list("name", flat=True)) == ["new"]


def test_the_preview_of_fire_times(admin_client, client):
    preview = url("periodicentry", "preview")
    answer = admin_client.get(preview, {"cron": "30 2 * * *", "timezone": "UTC"}).json()
    assert len(answer["times"]) == 5 and all("02:30:00 UTC" in t for t in answer["times"])
    bad = admin_client.get(preview, {"cron": "61 * * * *"}).json()
    assert bad["times"] == [] and bad["error"]
    assert client.get(preview, {"cron": "* * * * *"}).status_code == 302  # to the login


@pytest.mark.django_db(transaction=True)
def test_a_group_with_the_pages_old_rights_keeps_them_across_the_migration():
    call_command("migrate", "cogworker_django", "0004", verbosity=0)
    old = Permission.objects.filter(
        content_type__app_label="cogworker_django", content_type__model="periodicentry"
    )
    assert {p.codename for p in old} >= {"view_periodicentry", "change_periodicentry"}
    group = Group.objects.create(name="operators")
    group.permissions.set(old.filter(codename__in=["view_periodicentry", "change_periodicentry"]))
    ids = set(group.permissions.values_list("id", flat=True))
    call_command("migrate", "cogworker_django", verbosity=0)
    assert set(Group.objects.get(name="operators").permissions.values_list("id", flat=True)) == ids
    now = {p.codename for p in Permission.objects.filter(content_type__model="periodicentry")}
    assert now >= {
        "add_periodicentry",
        "change_periodicentry",
        "delete_periodicentry",
        "view_periodicentry",
    }
    PeriodicEntry.objects.create(name="x", cron="* * * * *", job="testapp.jobs.noop")
    assert PeriodicEntry.objects.count() == 1
