"""XSpace message classes built at run time from our own schema table (no protoc, no TensorFlow).

`SCHEMA` mirrors `xplane.proto` beside this module (a test keeps the two in step); the field
numbers are the public ones of tensorflow/tsl `xplane.proto`, cited there. The classes come from
`google.protobuf.message_factory`, so decoding is the protobuf package's own (upb) parser.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "traceanalyzer.xplane"
FILE_NAME = "traceanalyzer/xplane.proto"

_F = descriptor_pb2.FieldDescriptorProto
_TYPES = {
    "int64": _F.TYPE_INT64, "uint64": _F.TYPE_UINT64, "double": _F.TYPE_DOUBLE,
    "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES,
}

# message -> [(field name, number, type, repeated, oneof)]; a type that is not a scalar names a
# message; "map:K:V" is a map field with scalar key K and message value V.
SCHEMA: dict[str, list[tuple[str, int, str, bool, str]]] = {
    "XSpace": [
        ("planes", 1, "XPlane", True, ""),
        ("errors", 2, "string", True, ""),
        ("warnings", 3, "string", True, ""),
        ("hostnames", 4, "string", True, ""),
    ],
    "XPlane": [
        ("id", 1, "int64", False, ""),
        ("name", 2, "string", False, ""),
        ("lines", 3, "XLine", True, ""),
        ("event_metadata", 4, "map:int64:XEventMetadata", True, ""),
        ("stat_metadata", 5, "map:int64:XStatMetadata", True, ""),
        ("stats", 6, "XStat", True, ""),
    ],
    "XLine": [
        ("id", 1, "int64", False, ""),
        ("name", 2, "string", False, ""),
        ("timestamp_ns", 3, "int64", False, ""),
        ("events", 4, "XEvent", True, ""),
        ("duration_ps", 9, "int64", False, ""),
        ("display_id", 10, "int64", False, ""),
        ("display_name", 11, "string", False, ""),
    ],
    "XEvent": [
        ("metadata_id", 1, "int64", False, ""),
        ("offset_ps", 2, "int64", False, "data"),
        ("num_occurrences", 5, "int64", False, "data"),
        ("duration_ps", 3, "int64", False, ""),
        ("stats", 4, "XStat", True, ""),
    ],
    "XStat": [
        ("metadata_id", 1, "int64", False, ""),
        ("double_value", 2, "double", False, "value"),
        ("uint64_value", 3, "uint64", False, "value"),
        ("int64_value", 4, "int64", False, "value"),
        ("str_value", 5, "string", False, "value"),
        ("bytes_value", 6, "bytes", False, "value"),
        ("ref_value", 7, "uint64", False, "value"),
    ],
    "XEventMetadata": [
        ("id", 1, "int64", False, ""),
        ("name", 2, "string", False, ""),
        ("metadata", 3, "bytes", False, ""),
        ("display_name", 4, "string", False, ""),
        ("stats", 5, "XStat", True, ""),
        ("child_id", 6, "int64", True, ""),
    ],
    "XStatMetadata": [
        ("id", 1, "int64", False, ""),
        ("name", 2, "string", False, ""),
        ("description", 3, "string", False, ""),
    ],
}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3")
    for msg_name, fields in SCHEMA.items():
        msg = fd.message_type.add(name=msg_name)
        oneofs: list[str] = []
        for name, number, ftype, repeated, oneof in fields:
            field = msg.field.add(name=name, number=number, json_name=_camel(name))
            field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if ftype.startswith("map:"):
                _, key_type, value_type = ftype.split(":")
                entry_name = _camel(name)[:1].upper() + _camel(name)[1:] + "Entry"
                entry = msg.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_TYPES[key_type],
                                label=_F.LABEL_OPTIONAL, json_name="key")
                entry.field.add(name="value", number=2, type=_F.TYPE_MESSAGE,
                                type_name=f".{PACKAGE}.{value_type}", label=_F.LABEL_OPTIONAL,
                                json_name="value")
                field.type = _F.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{msg_name}.{entry_name}"
            elif ftype in _TYPES:
                field.type = _TYPES[ftype]
            else:
                field.type = _F.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{ftype}"
            if oneof:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    msg.oneof_decl.add(name=oneof)
                field.oneof_index = oneofs.index(oneof)
    return fd


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@lru_cache(maxsize=1)
def message_classes() -> dict[str, Any]:
    """The message classes by name, built once in a private descriptor pool."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
            for name in SCHEMA}


def XSpace() -> Any:
    """A new, empty XSpace message."""
    return message_classes()["XSpace"]()
