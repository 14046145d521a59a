"""The password hasher of the test processes: PBKDF2-SHA256 as production hashes (the same
algorithm name, so a hash made here verifies anywhere, its iteration count being part of it), with
1,000 iterations where production uses Django's 1,000,000. Every sign-in of the suite (browsers,
forms, the lockout tests) checks a password; at a third of a second each, that was a fair share of
the suite's time. Django's own advice for test suites (docs: "Speeding up the tests")."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1_000
