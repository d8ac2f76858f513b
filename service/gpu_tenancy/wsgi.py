"""WSGI entry point for API workers (gunicorn gpu_tenancy.wsgi:application).
The engine runs apart (`gpu-tenancy engine`), so workers do not run it."""
import os

from gpu_tenancy.app import create_app
from gpu_tenancy.config import Config

application = create_app(Config.load(os.environ.get("GPU_TENANCY_CONFIG"), run_engine=False))
