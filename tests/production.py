"""The production variables docs/configuration.md documents, for tests that run Reckon the
way it is deployed: DEBUG off, behind a TLS-terminating proxy, cookies Secure, HSTS on."""

from __future__ import annotations

SECRET = "test-only-4f9c2a7e1b8d6c3f0a5e9b2d7c4f1a8e6b3d0c9f2a5e8b1d4c7f0a3e6b9d2c5f8a"


def production_env(**extra: str) -> dict[str, str]:
    return {
        "DEBUG": "false",
        "SECRET_KEY": SECRET,
        "ALLOWED_HOSTS": "reckon.example.com,127.0.0.1",
        "RECKON_HTTPS": "true",
        "RECKON_TLS_PROXY": "true",
        **extra,
    }
