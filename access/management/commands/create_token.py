"""``manage.py create_token NAME --scope append [--scope read] [--tenant acme] [--json]``

Creates an API token and prints its secret once; only its sha256 is stored.
``--revoke PREFIX`` revokes the live token whose secret starts with PREFIX.
"""

import json

from django.core.management.base import BaseCommand, CommandError

from access.models import ApiToken
from access.tokens import SCOPES, TokenError, token_create, token_revoke


class Command(BaseCommand):
    help = "Create an API token (the secret is printed once) or revoke one."

    def add_arguments(self, parser):
        parser.add_argument("name", nargs="?", help="who or what will use the token")
        parser.add_argument("--scope", action="append", default=[], choices=SCOPES, help="repeat for several scopes")
        parser.add_argument("--tenant", action="append", default=[], help="limit the token to a tenant; repeat for several")
        parser.add_argument("--revoke", metavar="PREFIX", help="revoke the live token whose secret starts with PREFIX")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, name, scope, tenant, revoke, **options):
        if revoke:
            matches = list(ApiToken.objects.filter(prefix=revoke[:10], revoked_at__isnull=True))
            if len(matches) != 1:
                raise CommandError(f"no single live token with prefix {revoke[:10]!r} ({len(matches)} found)")
            token_revoke(token=matches[0])
            self.stdout.write(f"revoked {matches[0]}")
            return
        if not name:
            raise CommandError("name the token: manage.py create_token NAME --scope ...")
        try:
            token, secret = token_create(name=name, scopes=scope, tenants=tenant)
        except TokenError as exc:
            raise CommandError(str(exc)) from None
        if options["json"]:
            self.stdout.write(json.dumps({"id": token.pk, "name": token.name, "scopes": token.scopes, "tenants": token.tenants, "secret": secret}))
        else:
            self.stdout.write(f"token {token.name!r} scopes={','.join(token.scopes)} tenants={','.join(token.tenants) or 'all'}")
            self.stdout.write(f"secret (shown once, store it now): {secret}")
