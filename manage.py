#!/usr/bin/env python
"""Reckon's command-line entry point."""
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reckon.settings")
    if sys.argv[1:2] == ["bench"]:
        # The benchmarks' app is installed where they run, never in production (reckon/settings.py).
        os.environ.setdefault("RECKON_BENCH", "1")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A setting the environment gives wrongly (reckon/env.py names the variable): one line, no traceback.
        sys.stderr.write(f"configuration error: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
