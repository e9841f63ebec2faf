from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

from cogworker_django import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", metrics.view),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
