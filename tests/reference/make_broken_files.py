#!/usr/bin/python3
"""Writes tests/broken_files/: malformed safetensors files, and a few valid ones in valid/.

Python 3 standard library only:

    /usr/bin/python3 tests/reference/make_broken_files.py

The format (Hugging Face's safetensors): an unsigned 64-bit little-endian header length N, N bytes
of UTF-8 JSON (possibly padded with trailing spaces), then the data buffer. The header maps each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data buffer, end
exclusive) and may hold "__metadata__", an object of strings. The tensors' byte ranges must tile
the data buffer exactly.

broken_files/*.safetensors  each file breaks one rule; README.md (written here too) lists them.
                            tests/test_safetensors.cpp requires every one of them to throw.
broken_files/valid/         files written by write_safetensors() (safetensors_writer.py, beside this
                            script), a small writer that follows the format and the reference
                            implementation's layout; the C++ test reads them and compares its own
                            writer's bytes with them.

The Python `safetensors` package is not installed on attend's machines (neither PyPI nor Debian
offers it there), so the valid files come from that independent writer instead.
"""

import json
import os
import struct

from safetensors_writer import write_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.normpath(os.path.join(HERE, "..", "broken_files"))
VALID_DIR = os.path.join(OUT_DIR, "valid")


# ---- broken files --------------------------------------------------------------------------------

def raw_file(header, data=b"", length=None):
    """8-byte length (len(header) unless given), header bytes, data: no checks, no padding."""
    if isinstance(header, str):
        header = header.encode("utf-8")
    if length is None:
        length = len(header)
    return struct.pack("<Q", length) + header + data


def one_tensor(entry, data):
    """A file with one tensor "w" whose entry is `entry` (a dict, dumped as JSON)."""
    return raw_file(json.dumps({"w": entry}), data)


def two_tensors(a, b, data):
    return raw_file(json.dumps({"a": a, "b": b}), data)


FOUR_F32 = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)  # 16 bytes
GOOD_ENTRY = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
GOOD_HEADER = json.dumps({"w": GOOD_ENTRY})


def with_entry(**changes):
    entry = dict(GOOD_ENTRY)
    for key, value in changes.items():
        if value is None:
            del entry[key]
        else:
            entry[key] = value
    return entry


def truncated_file():
    """A valid two-tensor file with its last 6 bytes cut off."""
    whole = two_tensors({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                        {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}, FOUR_F32 * 2)
    return whole[:-6]


def deeply_nested_shape(depth=2000):
    header = '{"w":{"dtype":"F32","shape":' + "[" * depth + "]" * depth + ',"data_offsets":[0,0]}}'
    return raw_file(header)


# (file name, what is wrong with it, its bytes)
BROKEN = [
    ("empty.safetensors", "0 bytes: no header length", b""),
    ("short.safetensors", "5 bytes: shorter than the 8-byte header length", b"\x10\x00\x00\x00\x00"),
    ("header_past_end.safetensors", "header length 1000 in an 89-byte file",
     raw_file(GOOD_HEADER, FOUR_F32, length=1000)),
    ("header_length_2_63.safetensors", "header length 2^63: a huge declared size that must not be allocated",
     raw_file(GOOD_HEADER, FOUR_F32, length=2 ** 63)),
    ("header_length_max.safetensors", "header length 2^64 - 1: 8 + N overflows 64 bits",
     raw_file(GOOD_HEADER, FOUR_F32, length=2 ** 64 - 1)),
    ("header_empty.safetensors", "header length 0: an empty header is not JSON", raw_file(b"")),
    ("json_truncated.safetensors", "the JSON stops in the middle of an entry",
     raw_file('{"w": {"dtype": "F32", "sha')),
    ("json_trailing_garbage.safetensors", "a JSON object followed by more text in the header",
     raw_file(GOOD_HEADER + " x", FOUR_F32)),
    ("header_nul_padding.safetensors", "the header is padded with NUL bytes instead of spaces",
     raw_file(GOOD_HEADER.encode() + b"\x00" * 4, FOUR_F32)),
    ("header_invalid_utf8.safetensors", "a tensor name holds the byte 0xFF, not UTF-8",
     raw_file(b'{"w\xff": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}', FOUR_F32)),
    ("header_array.safetensors", "the header is a JSON array, not an object",
     raw_file("[" + json.dumps(GOOD_ENTRY) + "]", FOUR_F32)),
    ("header_string.safetensors", "the header is a JSON string, not an object", raw_file('"weights"')),
    ("entry_not_object.safetensors", "the entry of a tensor is an array, not an object",
     raw_file('{"w": [0, 16]}', FOUR_F32)),
    ("missing_dtype.safetensors", "a tensor entry without \"dtype\"", one_tensor(with_entry(dtype=None), FOUR_F32)),
    ("missing_shape.safetensors", "a tensor entry without \"shape\"", one_tensor(with_entry(shape=None), FOUR_F32)),
    ("missing_data_offsets.safetensors", "a tensor entry without \"data_offsets\"",
     one_tensor(with_entry(data_offsets=None), FOUR_F32)),
    ("dtype_not_string.safetensors", "\"dtype\" is the number 32", one_tensor(with_entry(dtype=32), FOUR_F32)),
    ("shape_not_array.safetensors", "\"shape\" is the string \"2x2\"",
     one_tensor(with_entry(shape="2x2"), FOUR_F32)),
    ("shape_negative.safetensors", "a dimension is -2", one_tensor(with_entry(shape=[-2, -2]), FOUR_F32)),
    ("shape_fractional.safetensors", "a dimension is 1.5", one_tensor(with_entry(shape=[1.5, 2]), FOUR_F32)),
    ("shape_float_integral.safetensors", "a dimension is 2.0, a JSON float, not an integer",
     one_tensor(with_entry(shape=[2.0, 2]), FOUR_F32)),
    ("shape_string_entry.safetensors", "a dimension is the string \"2\"",
     one_tensor(with_entry(shape=["2", 2]), FOUR_F32)),
    ("shape_deeply_nested.safetensors", "\"shape\" is an array nested 2000 deep", deeply_nested_shape()),
    ("offsets_not_pair.safetensors", "\"data_offsets\" has 3 entries",
     one_tensor(with_entry(data_offsets=[0, 8, 16]), FOUR_F32)),
    ("offsets_not_array.safetensors", "\"data_offsets\" is the string \"0-16\"",
     one_tensor(with_entry(data_offsets="0-16"), FOUR_F32)),
    ("offsets_strings.safetensors", "\"data_offsets\" are strings",
     one_tensor(with_entry(data_offsets=["0", "16"]), FOUR_F32)),
    ("offsets_negative.safetensors", "an offset is -16", one_tensor(with_entry(data_offsets=[-16, 0]), FOUR_F32)),
    ("offsets_begin_after_end.safetensors", "data_offsets [16, 0]: begin > end",
     one_tensor(with_entry(shape=[0], data_offsets=[16, 0]), FOUR_F32)),
    ("offsets_past_data.safetensors", "data_offsets [0, 64] in a 16-byte data buffer",
     one_tensor(with_entry(shape=[16], data_offsets=[0, 64]), FOUR_F32)),
    ("truncated.safetensors", "a valid file with its last 6 bytes cut off", truncated_file()),
    ("offsets_overlap.safetensors", "tensors a [0, 16) and b [8, 24) share bytes",
     two_tensors({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                 {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}, FOUR_F32 + FOUR_F32[:8])),
    ("offsets_hole.safetensors", "bytes [8, 16) of the data belong to no tensor",
     two_tensors({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                 {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}, FOUR_F32 + FOUR_F32[:8])),
    ("offsets_hole_at_start.safetensors", "the only tensor starts at byte 8 of the data",
     one_tensor(with_entry(shape=[2], data_offsets=[8, 16]), FOUR_F32)),
    ("trailing_bytes.safetensors", "8 bytes of data after the last tensor",
     one_tensor(GOOD_ENTRY, FOUR_F32 + FOUR_F32[:8])),
    ("byte_count_shape.safetensors", "F32 of shape (2, 3) needs 24 bytes; its offsets hold 20",
     one_tensor(with_entry(shape=[2, 3], data_offsets=[0, 20]), FOUR_F32 + FOUR_F32[:4])),
    ("byte_count_dtype.safetensors", "F64 of shape (4) needs 32 bytes; its offsets hold 16 (the data is F32)",
     one_tensor(with_entry(dtype="F64", shape=[4]), FOUR_F32)),
    ("unknown_dtype.safetensors", "dtype \"F31\" does not exist", one_tensor(with_entry(dtype="F31"), FOUR_F32)),
    ("dtype_lowercase.safetensors", "dtype \"f32\": dtype names are upper case",
     one_tensor(with_entry(dtype="f32"), FOUR_F32)),
    ("unsupported_dtype.safetensors", "dtype \"I64\": valid safetensors, but attend reads only F32, F64, F16, BF16",
     one_tensor(with_entry(dtype="I64", shape=[2]), FOUR_F32)),
    ("shape_product_overflow.safetensors", "shape (2^32, 2^32): the element count overflows 64 bits",
     one_tensor(with_entry(shape=[2 ** 32, 2 ** 32]), FOUR_F32)),
    ("shape_bytes_overflow.safetensors", "F32 of shape (2^62): the byte count overflows 64 bits",
     one_tensor(with_entry(shape=[2 ** 62]), FOUR_F32)),
    ("huge_declared_size.safetensors", "F32 of shape (2^30, 2^30) at [0, 2^62): 4 EiB declared, 16 bytes there",
     one_tensor(with_entry(shape=[2 ** 30, 2 ** 30], data_offsets=[0, 2 ** 62]), FOUR_F32)),
    ("shape_dim_too_large.safetensors", "shape (0, 2^63): no elements, but 2^63 does not fit in a signed index",
     one_tensor(with_entry(shape=[0, 2 ** 63], data_offsets=[0, 0]), b"")),
    ("duplicate_tensor.safetensors", "the tensor name \"w\" appears twice in the header",
     raw_file('{"w": %s, "w": %s}' % (json.dumps(GOOD_ENTRY), json.dumps(GOOD_ENTRY)), FOUR_F32)),
    ("duplicate_field.safetensors", "\"dtype\" appears twice in one entry",
     raw_file('{"w": {"dtype": "F64", "dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}', FOUR_F32)),
    ("metadata_not_object.safetensors", "\"__metadata__\" is a string",
     raw_file('{"__metadata__": "pt", "w": %s}' % json.dumps(GOOD_ENTRY), FOUR_F32)),
    ("metadata_not_string.safetensors", "a \"__metadata__\" value is a number",
     raw_file('{"__metadata__": {"epochs": 3}, "w": %s}' % json.dumps(GOOD_ENTRY), FOUR_F32)),
]


# ---- valid files ---------------------------------------------------------------------------------

def bf16(bits):
    """The float32 whose upper half is `bits` (the value a BF16 element with these bits stands for)."""
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


VALID = {
    # Every dtype attend reads, ranks 0 to 4, an empty tensor, metadata; the reference's layout
    # puts F64 first, then F32, BF16, F16, each group by name.
    "mixed_dtypes.safetensors": (
        {
            "bias": ("F64", [3], [0.1, -2.5, 1e-300]),
            "weight": ("F32", [2, 3], [0.5, -1.25, 3.0, 0.0, -0.0, 1024.0]),
            "count": ("F32", [], [42.0]),
            "empty": ("F32", [0, 3], []),
            "embedding": ("BF16", [2, 2], [1.0, bf16(0x4049), -0.0, float("inf")]),
            "half": ("F16", [1, 2, 1, 2], [65504.0, 2.0 ** -24, -2.0, float("-inf")]),
        },
        {"format": "pt", "source": "make_broken_files.py"},
    ),
    # Single-dtype files: attend's writer must produce these bytes exactly.
    "layout_f32.safetensors": (
        {
            "attn.0": ("F32", [1, 2, 3], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
            "b": ("F32", [2], [-1.5, 0.25]),
            "a": ("F32", [], [7.0]),
        },
        {"format": "pt"},
    ),
    "layout_f64.safetensors": (
        {
            "W_q.weight": ("F64", [2, 2], [0.1, 0.2, 0.3, 0.4]),
            "empty": ("F64", [3, 0], []),
        },
        None,
    ),
}


def write_readme():
    lines = [
        "# Broken safetensors files",
        "",
        "Written by `tests/reference/make_broken_files.py` (`/usr/bin/python3 tests/reference/make_broken_files.py`);",
        "`tests/test_safetensors.cpp` requires `attend::load_safetensors` to throw `std::runtime_error` on each,",
        "with a message naming the file and the problem (the phrase it expects is in the test's table).",
        "Every file breaks one rule of the format and is otherwise valid.",
        "",
        "| file | what is wrong |",
        "| --- | --- |",
    ]
    for name, problem, _ in BROKEN:
        lines.append("| `%s` | %s |" % (name, problem))
    lines += [
        "",
        "`valid/` holds valid files written by `tests/reference/safetensors_writer.py`, a small writer that follows the",
        "format and the reference implementation's layout (the Python `safetensors` package is not available here):",
        "",
        "| file | what it holds |",
        "| --- | --- |",
        "| `valid/mixed_dtypes.safetensors` | F64, F32, BF16 and F16 tensors of ranks 0 to 4, an empty one, metadata |",
        "| `valid/layout_f32.safetensors` | three F32 tensors and metadata: `save_safetensors<float>` must write these bytes |",
        "| `valid/layout_f64.safetensors` | two F64 tensors, one empty, no metadata: `save_safetensors<double>` must write these bytes |",
        "",
    ]
    with open(os.path.join(OUT_DIR, "README.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    os.makedirs(VALID_DIR, exist_ok=True)
    names = [name for name, _, _ in BROKEN]
    assert len(names) == len(set(names))
    for name, _, content in BROKEN:
        assert len(content) < 16384, name
        with open(os.path.join(OUT_DIR, name), "wb") as f:
            f.write(content)
    for name, (tensors, metadata) in VALID.items():
        write_safetensors(os.path.join(VALID_DIR, name), tensors, metadata)
    write_readme()
    print("wrote %d broken files and %d valid ones in %s" % (len(BROKEN), len(VALID), OUT_DIR))


if __name__ == "__main__":
    main()
