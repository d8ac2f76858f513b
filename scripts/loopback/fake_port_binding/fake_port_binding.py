"""An ML2 mechanism driver for the loopback cloud: it binds every port, on any host.

A real cloud binds a port when the agent (OVS, OVN...) of the port's host says
it can wire it. The loopback cloud runs no agent and its hypervisor is fake, so
this driver says yes for every host and every segment type, and marks the port
ACTIVE right away (no agent will report it up). Fixed IPs, security groups,
routers and floating IPs stay neutron's own: only the binding is faked.

Neutron loads mechanism drivers by entry point only (``neutron.ml2.
mechanism_drivers``), hence the pyproject.toml beside this file; install.sh
installs it into the venv, and configure.sh names it ``gt_fake_host``.
"""

from neutron_lib import constants
from neutron_lib.api.definitions import portbindings
from neutron_lib.plugins.ml2 import api

VIF_DETAILS = {
    portbindings.CAP_PORT_FILTER: True,           # security groups "enforced" (in the DB only)
    portbindings.OVS_HYBRID_PLUG: False,
    portbindings.VIF_DETAILS_CONNECTIVITY: portbindings.CONNECTIVITY_L2,
}


class FakeHostMechanismDriver(api.MechanismDriver):

    def initialize(self):
        pass

    @property
    def connectivity(self):
        return portbindings.CONNECTIVITY_L2

    def bind_port(self, context):
        if context.current.get(portbindings.VNIC_TYPE, portbindings.VNIC_NORMAL) != portbindings.VNIC_NORMAL:
            return  # direct/SR-IOV ports: nothing here pretends to pass a NIC through
        for segment in context.segments_to_bind:
            # "ovs" is what nova sees on a real cloud; nova's fake hypervisor plugs nothing
            context.set_binding(segment[api.ID], portbindings.VIF_TYPE_OVS, VIF_DETAILS,
                                status=constants.PORT_STATUS_ACTIVE)
            return
