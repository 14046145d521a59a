from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from evidence.signing import fingerprint, public_pem, retired_keys, signing_key_load


class Command(BaseCommand):
    help = (
        "Name the key that signs checkpoints and evidence bundles, and the retired keys whose checkpoints still verify; "
        "with --keyring, write their public keys as one PEM file for reviewers to pin (reckon-verify --public-key)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--keyring", metavar="FILE", help="write the current and retired public keys here, current first")

    def handle(self, *args, keyring, **options):
        try:
            key = signing_key_load()
            retired = retired_keys()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"signing key {fingerprint(key)}")
        for name in retired:
            self.stdout.write(f"retired key {name}")
        if keyring:
            from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

            pems = [public_pem(key)] + [k.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo) for k in retired.values() if fingerprint(k) != fingerprint(key)]
            try:
                Path(keyring).write_bytes(b"".join(pems))
            except OSError as exc:
                raise CommandError(f"--keyring {keyring}: {exc.strerror}") from None
            self.stdout.write(f"wrote {len(pems)} public key{'s' if len(pems) != 1 else ''} to {keyring}")
