"""gunicorn entry points for the loopback OpenStack APIs.

start.sh runs e.g. ``gunicorn --chdir scripts/loopback 'wsgi_apps:nova_api()'``
with env GT_LB_ETC set to the generated config folder. Each function builds
the service's WSGI application on first call (gunicorn calls it once per
worker) and returns it.

The reason for the wrappers: keystone, nova, cinder, neutron and heat build their
app at import time and hand ``sys.argv`` to oslo.config, which then chokes on
gunicorn's own options ("unrecognized arguments: -b ..."). While the app is
imported, argv is swapped for one that holds only what the service should see.
Placement and glance read only env, but are here too so that every API starts
the same way.
"""

import contextlib
import os
import sys


def _etc(*parts):
    return os.path.join(os.environ["GT_LB_ETC"], *parts)


@contextlib.contextmanager
def _argv(*args):
    saved = sys.argv
    sys.argv = [saved[0], *args]
    try:
        yield
    finally:
        sys.argv = saved


def keystone():
    os.environ["OS_KEYSTONE_CONFIG_DIR"] = _etc("keystone")
    with _argv():
        from keystone.wsgi.api import application
    return application


def placement():
    os.environ["OS_PLACEMENT_CONFIG_DIR"] = _etc("placement")
    from placement.wsgi.api import application
    return application


def glance():
    os.environ["OS_GLANCE_CONFIG_DIR"] = _etc("glance")
    from glance.wsgi.api import application
    return application


def nova_api():
    # nova-api reads nova.conf from this folder; the per-host compute
    # files live elsewhere and are for nova-compute only.
    os.environ["OS_NOVA_CONFIG_DIR"] = _etc("nova")
    with _argv():
        from nova.wsgi.osapi_compute import application
    return application


def cinder_api():
    with _argv("--config-file", _etc("cinder", "cinder.conf")):
        from cinder.wsgi.api import application
    return application


def neutron():
    # reads neutron.conf and plugins/ml2/ml2_conf.ini from this folder
    os.environ["OS_NEUTRON_CONFIG_DIR"] = _etc("neutron")
    with _argv():
        from neutron.wsgi.api import application
    return application


def heat_api():
    # heat-api's init_application() parses sys.argv as well
    with _argv("--config-file", _etc("heat", "heat.conf")):
        from heat.wsgi.api import application
    return application
