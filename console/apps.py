from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Reckon console"

    def ready(self):
        from django.contrib.auth.signals import user_logged_in

        from console.zones import reader_zone_on_login

        user_logged_in.connect(reader_zone_on_login, dispatch_uid="reckon-reader-zone")
