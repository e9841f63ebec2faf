"""signatures.CallCheck answers as inspect.Signature.bind does, for every kind of
parameter and call (its fast path must never accept what bind refuses, nor refuse what
bind accepts)."""

from __future__ import annotations

import inspect
import itertools

import pytest

from cogworker_django.core import signatures


def f_none(): ...
def f_one(a): ...
def f_default(a, b=1): ...
def f_kwonly(a, *, k): ...
def f_kwonly_default(a, *, k=2): ...
def f_var(a, *rest): ...
def f_varkw(a, **extra): ...
def f_all(a, b=1, *rest, k, m=3, **extra): ...
def f_posonly(a, /, b): ...
def f_posonly_varkw(a, /, **extra): ...


FUNCTIONS = [
    f_none, f_one, f_default, f_kwonly, f_kwonly_default, f_var, f_varkw, f_all, f_posonly,
    f_posonly_varkw,
]  # fmt: skip
ARGS = [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)]
KWARGS = [{}, {"a": 1}, {"b": 2}, {"k": 3}, {"m": 4}, {"z": 5}, {"a": 1, "k": 3}, {"b": 2, "k": 3}]


@pytest.mark.parametrize("func", FUNCTIONS, ids=lambda f: f.__name__)
def test_the_check_agrees_with_bind(func):
    check = signatures.CallCheck(func)
    sig = inspect.signature(func)
    for args, kwargs in itertools.product(ARGS, KWARGS):
        try:
            sig.bind(*args, **kwargs)
            expected = None
        except TypeError as exc:
            expected = str(exc)
        assert check.problem(args, kwargs) == expected, (func.__name__, args, kwargs)


def test_a_callable_python_cannot_inspect_is_not_checked():
    check = signatures.CallCheck(max)  # a builtin without a signature
    assert check.signature is None
    assert check.problem((1, 2, 3, 4), {"x": 1}) is None
