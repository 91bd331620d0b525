"""The ``err_msg`` dcgm-exporter puts on ``DCGM_FI_DEV_XID_ERRORS``: each XID's name in NVIDIA's
XID catalogue (docs.nvidia.com/deploy/xid-errors), indexed by XID; ``Unknown Error`` past the
end. With ``err_code`` (the XID) these labels are always set, 0 (``No Error``) included, so a
dashboard or alert written against dcgm-exporter's series matches kgpu's.
"""

from __future__ import annotations

UNKNOWN = "Unknown Error"
_PUSH = "Invalid or corrupted push buffer stream"
_VP = "Video processor exception"
_GSP = "GPU stopped processing"

XID_NAMES: tuple[str, ...] = (
    "No Error",
    _PUSH,
    _PUSH,
    _PUSH,
    _PUSH,
    "Unused",
    _PUSH,  # 0-6
    "Invalid or corrupted push buffer address",
    _GSP,
    "Driver error programming GPU",  # 7-9
    "Unused",
    _PUSH,
    "Driver error handling GPU exception",
    "Graphics Engine Exception",  # 10-13
    "Unused",
    "Unused",
    "Display engine hung",
    "Unused",  # 14-17
    "Bus mastering disabled in PCI Config Space",
    "Display Engine error",  # 18-19
    "Invalid or corrupted Mpeg push buffer",  # 20
    "Invalid or corrupted Motion Estimation push buffer",  # 21
    "Invalid or corrupted Video Processor push buffer",
    "Unused",  # 22-23
    "GPU semaphore timeout",
    "Invalid or illegal push buffer stream",  # 24-25
    "Framebuffer timeout",
    _VP,
    _VP,
    _VP,
    "GPU semaphore access error",  # 26-30
    "GPU memory page fault",
    _PUSH,
    "Internal micro-controller error",
    _VP,
    _VP,
    _VP,  # 31-36
    "Driver firmware error",
    "Driver firmware error",
    "Unused",
    "Unused",
    "Unused",  # 37-41
    _VP,
    _GSP,
    "Graphics Engine fault during context switch",  # 42-44
    "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    _GSP,
    _VP,
    "Double Bit ECC Error",  # 46-48
    "Unused",
    "Unused",
    "Unused",
    "Unused",
    "Unused",  # 49-53
    "Auxiliary power is not connected to the GPU board",
    "Unused",
    "Display Engine error",  # 54-56
    "Error programming video memory interface",  # 57
    "Unstable video memory interface detected",
    "Internal micro-controller error",
    _VP,  # 58-60
    "Internal micro-controller breakpoint/warning",
    "Internal micro-controller halt",  # 61-62
    "ECC page retirement or row remapping recording event",  # 63
    "ECC page retirement or row remapper recording failure",
    _VP,  # 64-65
    "Illegal access by driver",
    "Illegal access by driver",
    "NVDEC0 Exception",  # 66-68
    "Graphics Engine class error",
    "CE3: Unknown Error",
    "CE4: Unknown Error",  # 69-71
    "CE5: Unknown Error",
    "NVENC2 Error",
    "NVLINK Error",
    "CE6: Unknown Error",  # 72-75
    "CE7: Unknown Error",
    "CE8: Unknown Error",
    "vGPU Start Error",  # 76-78
    "GPU has fallen off the bus",
    "Corrupted data sent to GPU",
    "VGA Subsystem Error",  # 79-81
    "NVJPG0 Error",
    "NVDEC1 Error",
    "NVDEC2 Error",
    "CE9: Unknown Error",  # 82-85
    "OFA Exception",
    "Reserved",
    "NVDEC3 Error",
    "NVDEC4 Error",
    "Reserved",
    "Reserved",  # 86-91
    "High single-bit ECC error rate",  # 92
    "Non-fatal violation of provisioned InfoROM wear limit",  # 93
    "Contained ECC error",
    "Uncontained ECC error",  # 94-95
    "NVDEC5 Error",
    "NVDEC6 Error",
    "NVDEC7 Error",  # 96-98
    "NVJPG1 Error",
    "NVJPG2 Error",
    "NVJPG3 Error",
    "NVJPG4 Error",  # 99-102
    "NVJPG5 Error",
    "NVJPG6 Error",
    "NVJPG7 Error",  # 103-105
    "SMBPBI Test Message",
    "SMBPBI Test Message Silent",
    "Reserved",  # 106-108
    "Context Switch Timeout Error",
    "Security Fault Error",  # 109-110
    "Display Bundle Error Event",
    "Display Supervisor Error",
    "DP Link Training Error",  # 111-113
    "Display Pipeline Underflow Error",
    "Display Core Channel Error",  # 114-115
    "Display Window Channel Error",
    "Display Cursor Channel Error",  # 116-117
    "Display Pixel Pipeline Error",
    "GSP RPC Timeout",
    "GSP Error",
    "C2C Link Error",  # 118-121
    "SPI PMU RPC Read Failure",
    "SPI PMU RPC Write Failure",  # 122-123
    "SPI PMU RPC Erase Failure",
    "Inforom FS Failure",  # 124-125
    "Robust Channel CE10 Error",
    "Robust Channel CE11 Error",  # 126-127
    "Robust Channel CE12 Error",
    "Robust Channel CE13 Error",  # 128-129
    "Robust Channel CE14 Error",
    "Robust Channel CE15 Error",  # 130-131
    "Robust Channel CE16 Error",
    "Robust Channel CE17 Error",  # 132-133
    "Robust Channel CE18 Error",
    "Robust Channel CE19 Error",  # 134-135
    "ALI Training Fail",
    "NVLink Privilege Error",
    "Robust Channel DLA Error",  # 136-138
    "Robust Channel OFA1 Error",
    "Unrecovered ECC Error",  # 139-140
    "Robust Channel Fast Path Error",
    "Robust Channel NVENVC3 Error",  # 141-142
    "GPU Initialization Failure",
    "NVLINK: Saw Error",
    "NVLINK: RLW Error",  # 143-145
    "NVLINK: TLW Error",
    "NVLINK: TREX Error",
    "NVLINK: NVLPW_CTRL Error",  # 146-148
    "NVLINK: NETIR Error",
    "NVLINK: MSE Error",  # 149-150
    "Robust Channel Key rotation Error",
    "Robust Channel DLA SMMU Error",  # 151-152
    "Robust Channel DLA timeout Error",
    "GPU Recovery Action Changed",  # 153-154
    "NVLINK: SW Defined Error",
    "Resource Retirement Event",  # 155-156
    "Resource Retirement Failure",
    "GPU Fatal Timeout",  # 157-158
    "Robust Channel CHI Non-Data Error",
    "Channel Retirement Event",  # 159-160
    "Channel Retirement Failure",
    "Power Smoothing HW Circuitry Reengaged",  # 161-162
    "Power Smoothing HW Circuitry Disengaged",  # 163
    "Power Smoothing HW Circuitry Low Lifetime",  # 164
    "Power Smoothing HW Circuitry Lifetime Exhausted",  # 165
    "NVLINK Secure Crypto Error",
    "PCIE Fatal Timeout",  # 166-167
    "Reduced GPU Memory Capacity (Errors found in write protection region)",  # 168
    "Internal micro-controller halt",
    "NVLINK: Interrupt seen in CC mode",  # 169-170
    "Uncorrectable DRAM Error",
    "Uncorrectable SRAM Error",  # 171-172
)


def xid_name(xid: int) -> str:
    """dcgm-exporter's ``err_msg`` for ``xid``."""
    return XID_NAMES[xid] if 0 <= xid < len(XID_NAMES) else UNKNOWN
