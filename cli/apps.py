from django.apps import AppConfig


class CliConfig(AppConfig):
    name = "cli"
    verbose_name = "Command line: the log and the uncertain calls printed for a person"
