"""The OSC plugin interface: API_NAME, API_VERSION_OPTION, API_VERSIONS,
make_client() and build_option_parser(), as python-openstackclient expects."""
from __future__ import annotations

from osc_lib import utils

API_NAME = "gpu"
SERVICE_TYPE = "gpu"
DEFAULT_API_VERSION = "1"
API_VERSION_OPTION = "os_gpu_api_version"
API_VERSIONS = {"1": "gpu_tenancy.osc.client.GpuClient"}


def make_client(instance):
    """A GpuClient on the session OSC authenticated, at the catalog's `gpu` endpoint
    unless an override is given (--os-gpu-endpoint-override, or --os-endpoint with
    --os-auth-type none)."""
    client_class = utils.get_client_class(API_NAME, instance._api_version[API_NAME], API_VERSIONS)
    return client_class.from_client_manager(instance)


def build_option_parser(parser):
    parser.add_argument(
        "--os-gpu-api-version", metavar="<gpu-api-version>",
        default=utils.env("OS_GPU_API_VERSION", default=DEFAULT_API_VERSION),
        help=f"gpu-tenancy API version, default={DEFAULT_API_VERSION} (Env: OS_GPU_API_VERSION)")
    # openstacksdk's own key for a service's endpoint: `gpu_endpoint_override` in
    # clouds.yaml, OS_GPU_ENDPOINT_OVERRIDE in the environment
    parser.add_argument(
        "--os-gpu-endpoint-override", metavar="<url>",
        default=utils.env("OS_GPU_ENDPOINT_OVERRIDE"),
        help="gpu-tenancy endpoint to use instead of the catalog's `gpu` service, e.g. "
             "http://127.0.0.1:8779 (Env: OS_GPU_ENDPOINT_OVERRIDE)")
    # The service's noauth2 mode (demo and tests) takes the caller's identity from
    # headers; these are sent only with --os-auth-type none.
    for name, what, default in (("project", "project id", None), ("user", "user id", None),
                                ("roles", "comma-separated roles", "member")):
        env = f"OS_GPU_NOAUTH_{name.upper()}"
        parser.add_argument(
            f"--os-gpu-noauth-{name}", metavar=f"<{name}>", default=utils.env(env, default=default),
            help=f"with --os-auth-type none: the {what} to act as on a gpu-tenancy in noauth2 mode"
                 + (f", default={default}" if default else "") + f" (Env: {env})")
    return parser
