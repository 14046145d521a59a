"""The run screen's evidence bundle download: the same files ``manage.py export_evidence`` writes
(evidence.bundles), as one zip, for reviewers who may export runs.

Masked unless the form asks otherwise; an unmasked bundle needs the sensitive-data permission and a
reason, like a reveal, and is recorded as an access before it is built (so the bundle's own access
records show it). A reason missing or too long is the person's to correct: the run screen comes back
with the form as they sent it and the message beside the reason field.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_POST

from evidence.bundles import Problem, evidence_build, evidence_zip
from access.roles import perm, requires
from access.tokens import principal_for_user
from console.views import run_screen_refused
from runs.errors import RunNotFound
from runs.selectors import run_get

MAX_REASON = 500


def _bad(request, message: str):
    return render(request, "400.html", {"exception": message}, status=400)


@requires("view_console", "export_run")
@require_POST
def run_evidence(request, run_id: str):
    try:
        run = run_get(run_id=run_id)
    except RunNotFound as exc:
        raise Http404(str(exc))
    unmasked = request.POST.get("unmasked") == "1"
    reason = (request.POST.get("reason") or "").strip()
    if unmasked:
        if not request.user.has_perm(perm("view_sensitive")):
            raise PermissionDenied("an unmasked evidence bundle needs the view sensitive permission")
        problem = "an unmasked evidence bundle needs a reason: say why it is needed (it is kept in the access record)" if not reason else ""
        if len(reason) > MAX_REASON:
            problem = f"the reason may be at most {MAX_REASON} characters; this one has {len(reason)}"
        if problem:
            return run_screen_refused(request, run, evidence={"unmasked": True, "reason": reason, "error": problem})
    try:
        files, _ = evidence_build(run_id=run_id, masked=not unmasked, who=principal_for_user(request.user), why=f"POST {request.path} evidence bundle, unmasked: {reason}")
    except (ValueError, Problem) as exc:
        return _bad(request, f"run {run_id}: {exc}")
    except ImproperlyConfigured as exc:  # no signing key: the server's configuration, not the request
        return HttpResponse(f"evidence bundles are unavailable: {exc}\n", status=503, content_type="text/plain; charset=utf-8")
    name = f"evidence-{run_id}-{'unmasked' if unmasked else 'masked'}"
    response = HttpResponse(evidence_zip(files=files, folder=name), content_type="application/zip")
    response["Content-Disposition"] = content_disposition_header(True, f"{name}.zip")
    response["Cache-Control"] = "no-store"
    return response
