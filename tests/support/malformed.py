"""Shared corpora of capsules, built with dlpack_ref.testing.CapsuleFactory.make
keywords: MALFORMED (each breaks one rule every DLPack consumer must check,
or dlpack-ref's device policy) and VALID (edge cases every consumer must accept)."""

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# (id, make() keywords, a regex the message must match, applies to legacy)
MALFORMED = [
    ("version-0.5", dict(version=(0, 5)), r"version 0\.5", False),
    ("version-2.0", dict(version=(2, 0)), r"version 2\.0", False),
    ("ndim--1", dict(ndim=-1), r"ndim=-1\b", True),
    ("ndim-65-override", dict(ndim=65), r"ndim=65\b", True),
    ("ndim-65-real", dict(shape=(1,) * 65), r"ndim=65\b", True),
    ("ndim-int32-min", dict(ndim=-(1 << 31)), str(-(1 << 31)), True),
    ("shape-negative", dict(shape=(2, -3)), r"shape\[1\]=-3\b", True),
    ("shape-int64-min", dict(shape=(INT64_MIN,)), str(INT64_MIN), True),
    ("shape-null", dict(shape_null=True), r"shape is NULL.*ndim=2", True),
    ("strides-null-1.2", dict(strides="null", version=(1, 2)), r"strides is NULL", False),
    ("strides-null-1.3", dict(strides="null"), r"strides is NULL", False),
    ("shape-product-overflow", dict(shape=(1 << 62, 4)), r"axis 1.*extent 4\b", True),
    ("shape-product-overflow-2", dict(shape=(1 << 32, 1 << 32)), str(1 << 32), True),
    ("stride-overflow", dict(shape=(3,), strides=(1 << 62,)), str(1 << 62), True),
    ("stride-int64-min", dict(shape=(2,), strides=(INT64_MIN,)), str(INT64_MIN), True),
    ("stride-int64-max", dict(shape=(2,), strides=(INT64_MAX,)), str(INT64_MAX), True),
    ("byte-extent-overflow", dict(shape=(2,), strides=(1 << 61,), dtype=(2, 64, 1)),
     str(1 << 61), True),
    ("byte-offset-overflow", dict(byte_offset=1 << 63), str(1 << 63), True),
    ("device-opencl", dict(device=(4, 0)), r"\(4, 0\)", True),
    ("device-extdev", dict(device=(12, 0)), r"\(12, 0\)", True),
    ("device-tpu", dict(device=(19, 0)), r"\(19, 0\) \(tpu:0\)", True),
    ("device-ascend", dict(device=(21, 1)), r"\(21, 1\) \(ascend:1\)", True),
    ("device-99", dict(device=(99, 0)), r"\(99, 0\)", True),
    ("device-0", dict(device=(0, 0)), r"\(0, 0\)", True),
    ("device-negative-type", dict(device=(-1, 0)), r"\(-1, 0\)", True),
    ("device-id-negative", dict(device=(1, -1)), r"device_id=-1\b", True),
    ("data-null", dict(data=None), r"data is NULL", True),
    ("data-null-0d", dict(shape=(), data=None), r"data is NULL", True),
]

# Valid-looking triples DLPack 1.3 does not define.
INVALID_DTYPES = [
    (0, 1, 1), (0, 4, 1), (0, 7, 1), (0, 128, 1), (1, 0, 1), (1, 24, 1),
    (2, 8, 1), (2, 128, 1), (2, 0, 1), (3, 64, 1), (4, 32, 1), (4, 8, 1),
    (5, 32, 1), (5, 256 - 1, 1), (6, 1, 1), (6, 32, 1), (7, 16, 1), (14, 6, 1),
    (15, 8, 1), (16, 4, 1), (17, 8, 1), (17, 6, 1), (18, 8, 1), (255, 8, 1),
    (2, 32, 0), (2, 32, 4), (0, 8, 16), (17, 4, 4), (17, 4, 0), (15, 6, 2),
]
MALFORMED += [
    (f"dtype-{c}-{b}-{l}", dict(dtype=(c, b, l)), rf"code={c}, bits={b}, lanes={l}\b", True)
    for c, b, l in INVALID_DTYPES
]

# Device types DLPack 1.3 defines but dlpack-ref holds no memory of: refused
# by from_dlpack's own policy, accepted by the universal checks.
POLICY_ONLY = {"device-opencl", "device-extdev", "device-tpu", "device-ascend"}

# (id, make() keywords, applies to legacy): at the edge of every rule, and valid.
VALID = [
    ("plain", dict(), True),
    ("0-d", dict(shape=()), True),
    ("ndim-64", dict(shape=(1,) * 64), True),
    ("empty-null-data", dict(shape=(0, 3), data=None), True),
    ("empty-huge-extents", dict(shape=(INT64_MAX, INT64_MAX, 0), strides=(0, 0, 1), data=None), True),
    ("stride-0-broadcast", dict(shape=(1 << 40,), strides=(0,)), True),
    ("negative-stride", dict(shape=(3,), strides=(-1,), byte_offset=8), True),
    ("byte-offset", dict(byte_offset=4), True),
    ("strides-null-1.1", dict(strides="null", version=(1, 1)), True),   # legacy: no version
    ("version-1.0", dict(version=(1, 0)), False),
    ("version-1.99", dict(version=(1, 99)), False),
    ("device-cuda-id-7", dict(device=(2, 7), data=None, shape=(0,)), True),
    ("float4-x2", dict(dtype=(17, 4, 2)), True),
    ("float6", dict(dtype=(15, 6, 1)), True),
    ("bool", dict(dtype=(6, 8, 1)), True),
    ("bcomplex32", dict(dtype=(18, 32, 1)), True),
    ("device-tpu-pinned", dict(device=(20, 0)), True),
]
