"""Jobs that keep what they received, for the tests of argument types
(tests/core/test_argument_types*.py). They run in an in-process worker, so what they
received is kept in this process's memory, as received (types, offsets, model rows),
under the token the test passes."""

from cogworker_django import job

received: dict[str, tuple[tuple, dict]] = {}


@job
def keep(token, *args, **kwargs):
    received[token] = (args, kwargs)


@job
async def akeep(token, *args, **kwargs):
    received[token] = (args, kwargs)


@job
def echo(value):
    return value


@job
def keep_title(token, article):
    """Keeps the article's title as the run read it."""
    received[token] = ((article.title,), {"pk": article.pk})


@job
async def akeep_title(token, article):
    received[token] = ((article.title,), {"pk": article.pk})
