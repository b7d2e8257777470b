"""Play's device targeting config in its real format, for the tests: the protobuf messages of bundletool's
src/main/proto/device_targeting_config.proto (package android.bundle; field names and numbers as there), built
here as descriptors, and the XML-to-message reading the Android Gradle Plugin does (DeviceTargetingConfigParser).

Two independent readings of the same facts the product code relies on: the XML must become a valid
DeviceGroupConfig message (no element or attribute the parser would drop), and bundletool's rules (group names,
non-empty groups, unique names) and its matching (DeviceTargetingConfigEvaluator: proto equality of SystemOnChip)
are applied to that message, not to qnndeploy's own structures.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

NS = "http://schemas.android.com/apk/config"
GROUP_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]*$")  # bundletool DeviceGroupConfigValidator
T = descriptor_pb2.FieldDescriptorProto
# message -> (field, number, type, label, message type): device_targeting_config.proto's DeviceGroupConfig tree
MESSAGES: dict[str, list[tuple[str, int, Any, Any, str | None]]] = {
    "DeviceGroupConfig": [("device_groups", 1, T.TYPE_MESSAGE, T.LABEL_REPEATED, "DeviceGroup")],
    "DeviceGroup": [("name", 1, T.TYPE_STRING, T.LABEL_OPTIONAL, None),
                    ("device_selectors", 2, T.TYPE_MESSAGE, T.LABEL_REPEATED, "DeviceSelector")],
    "DeviceSelector": [("device_ram", 1, T.TYPE_MESSAGE, T.LABEL_OPTIONAL, "DeviceRam"),
                       ("included_device_ids", 2, T.TYPE_MESSAGE, T.LABEL_REPEATED, "DeviceId"),
                       ("excluded_device_ids", 3, T.TYPE_MESSAGE, T.LABEL_REPEATED, "DeviceId"),
                       ("required_system_features", 4, T.TYPE_MESSAGE, T.LABEL_REPEATED, "SystemFeature"),
                       ("forbidden_system_features", 5, T.TYPE_MESSAGE, T.LABEL_REPEATED, "SystemFeature"),
                       ("system_on_chips", 6, T.TYPE_MESSAGE, T.LABEL_REPEATED, "SystemOnChip")],
    "DeviceRam": [("min_bytes", 1, T.TYPE_INT64, T.LABEL_OPTIONAL, None),
                  ("max_bytes", 2, T.TYPE_INT64, T.LABEL_OPTIONAL, None)],
    "DeviceId": [("build_brand", 1, T.TYPE_STRING, T.LABEL_OPTIONAL, None),
                 ("build_device", 2, T.TYPE_STRING, T.LABEL_OPTIONAL, None)],
    "SystemFeature": [("name", 1, T.TYPE_STRING, T.LABEL_OPTIONAL, None)],
    "SystemOnChip": [("manufacturer", 1, T.TYPE_STRING, T.LABEL_OPTIONAL, None),
                     ("model", 2, T.TYPE_STRING, T.LABEL_OPTIONAL, None)],
}


def _classes() -> dict:
    file = descriptor_pb2.FileDescriptorProto(name="device_targeting_config.proto", package="android.bundle",
                                              syntax="proto3")
    for name, fields in MESSAGES.items():
        msg = file.message_type.add(name=name)
        for field, number, kind, label, type_name in fields:
            f = msg.field.add(name=field, number=number, type=kind, label=label)
            if type_name:
                f.type_name = f".android.bundle.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"android.bundle.{name}"))
            for name in MESSAGES}


CLASSES = _classes()
# What each XML element of a selector becomes, and its attributes (AGP's DeviceTargetingConfigParser).
SELECTOR_CHILDREN = {"system-on-chip": ("system_on_chips", {"manufacturer": "manufacturer", "model": "model"}),
                     "included-device-id": ("included_device_ids", {"brand": "build_brand", "device": "build_device"}),
                     "excluded-device-id": ("excluded_device_ids", {"brand": "build_brand", "device": "build_device"}),
                     "required-system-feature": ("required_system_features", {"name": "name"}),
                     "forbidden-system-feature": ("forbidden_system_features", {"name": "name"})}


def parse(xml: str):
    """The DeviceGroupConfig message of a device targeting config; AssertionError for anything it would not
    carry (an unknown element or attribute, a missing attribute, another namespace)."""
    root = ET.fromstring(xml)
    assert root.tag == f"{{{NS}}}device-targeting-config", root.tag
    config = CLASSES["DeviceGroupConfig"]()
    for group in root:
        assert group.tag == f"{{{NS}}}device-group", group.tag
        assert set(group.attrib) == {"name"}, group.attrib
        g = config.device_groups.add(name=group.attrib["name"])
        for selector in group:
            assert selector.tag == f"{{{NS}}}device-selector", selector.tag
            assert set(selector.attrib) <= {"ram-min-bytes", "ram-max-bytes"}, selector.attrib
            s = g.device_selectors.add()
            for child in selector:
                assert child.tag.startswith(f"{{{NS}}}"), child.tag
                field, attrs = SELECTOR_CHILDREN[child.tag.split("}")[1]]
                assert set(child.attrib) <= set(attrs), child.attrib
                getattr(s, field).add(**{attrs[k]: v for k, v in child.attrib.items()})
    round_trip = CLASSES["DeviceGroupConfig"].FromString(config.SerializeToString())
    assert round_trip == config
    return config


def validate(config) -> None:
    """bundletool's DeviceGroupConfigValidator, and Play's documented limit of 5 selectors per group."""
    assert config.device_groups, "The device group config must contain at least one device group."
    names = [g.name for g in config.device_groups]
    assert len(set(names)) == len(names), f"Found duplicated device group names {names}."
    for g in config.device_groups:
        assert GROUP_NAME.match(g.name), g.name
        assert 1 <= len(g.device_selectors) <= 5, g
        for s in g.device_selectors:
            for chip in s.system_on_chips:
                assert chip.manufacturer and chip.model, chip


def matching_group(config, manufacturer: str, model: str, sdk: int, default: str) -> str:
    """The first group whose selector matches a phone by bundletool's rule: SystemOnChip proto equality; a phone
    below API 31 reports no SoC (Play's system-on-chip targeting is Android 12+)."""
    chip = CLASSES["SystemOnChip"](manufacturer=manufacturer, model=model) if sdk >= 31 else None
    for g in config.device_groups:
        for s in g.device_selectors:
            if not s.system_on_chips or (chip is not None and chip in list(s.system_on_chips)):
                return g.name
    return default
