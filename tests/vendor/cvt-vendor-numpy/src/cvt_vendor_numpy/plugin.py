"""The conveyor.plugins entry point: contributes the ``"vendor_numpy"`` carrier."""

from conveyor.plugins import hookimpl

CONVEYOR_PLUGIN_API = "1.0"


@hookimpl
def conveyor_carriers():
    from cvt_vendor_numpy.carrier import VendorNumpy

    return {"vendor_numpy": VendorNumpy}
