"""The django.tasks backend's public path (Django 6.0+)::

    TASKS = {"default": {"BACKEND": "cogworker_django.tasks_backend.CogworkerBackend"}}

The implementation is in the ``cogworker_django.djtasks`` package. On Django 5.2, which has
no ``django.tasks``, this module still imports; asking it for ``CogworkerBackend`` raises
an ImportError that says why.
"""

from __future__ import annotations

from typing import Any

from .djtasks import available

__all__: list[str]
if available():
    from .djtasks.backend import CogworkerBackend

    __all__ = ["CogworkerBackend"]
else:
    __all__ = []

    def __getattr__(name: str) -> Any:
        if name == "CogworkerBackend":
            import django

            raise ImportError(
                "cogworker_django.tasks_backend.CogworkerBackend needs Django 6.0+ "
                f"(django.tasks); this is Django {django.get_version()}."
            )
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
