"""The openstack cloud driver: Nova, Placement, Cinder, Glance and Keystone through openstacksdk."""
from gpu_tenancy.cloud.openstack.driver import OpenStackCloud

__all__ = ["OpenStackCloud"]
