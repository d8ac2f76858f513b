"""`openstack gpu ...`: the python-openstackclient plugin (installed with the `cli` extra).

plugin.py is what OSC loads (entry point `openstack.cli.extension`); client.py
talks to the REST API through OSC's keystoneauth session; one module of
commands per resource (lease, quota, capacity, queue, share), each
based on command.py's classes."""
