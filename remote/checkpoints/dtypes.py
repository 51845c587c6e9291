"""The dtypes safetensors defines: their sizes in bits, and the integer ones as struct formats.
Standard library only, Python 3.9+.
"""

U64_MAX = 2 ** 64 - 1

# Every dtype safetensors defines, with its size in bits (F4 and F6 pack below a byte).
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
# struct formats of the integer (and bool) dtypes, for reading d2t / t2d.
INT_FORMATS = {"I8": "b", "U8": "B", "I16": "h", "U16": "H", "I32": "i", "U32": "I",
               "I64": "q", "U64": "Q", "BOOL": "B"}
# The dtype names as one string object each: a header's values are new strings per tensor.
DTYPE_NAMES = dict((name, name) for name in DTYPE_BITS)
