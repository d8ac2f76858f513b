"""WSGI entry point for API workers (gunicorn gpu_tenancy.wsgi:application).
The engine runs apart (`gpu-tenancy engine`), so workers do not run it.

noauth2 believes whatever identity a request states: this production entry
point refuses it unless the config file says `allow_noauth2: true`, so that no
environment variable alone can open the service to anyone."""
import os

from gpu_tenancy.app import create_app
from gpu_tenancy.config import Config


def make_application(config_path: str | None):
    config = Config.load(config_path, run_engine=False)
    if config.auth_strategy == "noauth2" and not config.allow_noauth2:
        raise RuntimeError("auth_strategy noauth2 trusts any caller's identity headers: the production entry "
                           "point refuses it unless the config file sets allow_noauth2: true")
    return create_app(config)


application = make_application(os.environ.get("GPU_TENANCY_CONFIG"))
