"""The runtime layer, the ACL analog: a device's memory and its allocation policies
(:mod:`.pages`), copies between host and device and what they cost (:mod:`.copy`), and the
device as a host program uses it, with pyACL's names (:mod:`.device`)."""
from .copy import KINDS, LARGE_COPY_CHUNK_BYTES, LARGE_COPY_ENV, copy_us
from .device import CopyRecord, Device, DevicePtr
from .pages import POLICIES

__all__ = ["CopyRecord", "Device", "DevicePtr", "KINDS", "LARGE_COPY_CHUNK_BYTES", "LARGE_COPY_ENV", "POLICIES",
           "copy_us"]
