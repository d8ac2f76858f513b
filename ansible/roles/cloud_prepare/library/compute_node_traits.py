#!/usr/bin/python
# Apache-2.0
"""Ansible module: make traits present on (or absent from) the compute node
resource providers of named hosts, keeping every other trait they carry."""

DOCUMENTATION = r'''
---
module: compute_node_traits
short_description: Traits on the compute node resource providers of hosts
description:
  - Adds traits to, or removes them from, the Placement resource provider of
    each named compute node (the root provider Nova names after the host).
    Other traits of the provider stay. The trait itself must exist.
extends_documentation_fragment:
  - openstack.cloud.openstack
options:
  hosts:
    description: >-
      compute hosts, as Placement names their root providers or as Nova names their
      nova-compute service (the names host aggregates take)
    type: list
    elements: str
    required: true
  traits:
    description: the traits
    type: list
    elements: str
    required: true
  state:
    description: present or absent
    type: str
    default: present
    choices: [present, absent]
'''

EXAMPLES = r'''
- name: Mark the GPU hosts
  compute_node_traits:
    cloud: admin
    hosts: [gpu-a100-1, gpu-a100-2]
    traits: [CUSTOM_GPU_TENANCY]
'''

RETURN = r'''
providers:
  description: each host's provider and its traits after the change
  returned: always
  type: dict
'''

from ansible_collections.openstack.cloud.plugins.module_utils.openstack import OpenStackModule

# traits of a provider with its generation: Placement 1.6
MICROVERSION = "1.6"
# a hypervisor with its service host, its id its compute node's uuid (and not 2.88, whose list
# asks every compute for its uptime: one host down and the list fails)
HYPERVISORS = "2.53"


class ComputeNodeTraits(OpenStackModule):
    argument_spec = dict(
        hosts=dict(type='list', elements='str', required=True),
        traits=dict(type='list', elements='str', required=True),
        state=dict(default='present', choices=['present', 'absent']),
    )
    module_kwargs = dict(supports_check_mode=True)

    def provider(self, host):
        found = self.conn.placement.get("/resource_providers", params={"name": host},
                                        microversion=MICROVERSION).json()["resource_providers"]
        if found:
            return found[0]["uuid"]
        # Placement names a compute node after its hypervisor hostname, which need not be the
        # service host the aggregates take (an FQDN, or nova.conf's host set): Nova's hypervisor
        # list maps one to the other, and a hypervisor's id (2.53+) is its node's provider
        url = "/os-hypervisors/detail"
        while url:
            body = self.conn.compute.get(url, microversion=HYPERVISORS).json()
            for hypervisor in body.get("hypervisors", []):
                if (hypervisor.get("service") or {}).get("host") == host:
                    return hypervisor["id"]
            url = next((link["href"] for link in body.get("hypervisors_links", []) if link.get("rel") == "next"),
                       None)
        self.fail_json(msg=f"no compute node of host {host} in Placement or Nova (is nova-compute running there?)")

    def run(self):
        wanted = set(self.params['traits'])
        present = self.params['state'] == 'present'
        changed, result = False, {}
        for host in self.params['hosts']:
            uuid = self.provider(host)
            url = f"/resource_providers/{uuid}/traits"
            body = self.conn.placement.get(url, microversion=MICROVERSION).json()
            current = set(body["traits"])
            target = current | wanted if present else current - wanted
            if target != current:
                changed = True
                if not self.ansible.check_mode:
                    self.conn.placement.put(url, json={
                        "traits": sorted(target),
                        "resource_provider_generation": body["resource_provider_generation"]},
                        microversion=MICROVERSION).raise_for_status()
            result[host] = {"id": uuid, "traits": sorted(target)}
        self.exit_json(changed=changed, providers=result)


def main():
    ComputeNodeTraits()()


if __name__ == '__main__':
    main()
