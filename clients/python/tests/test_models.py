"""The client's models cannot drift from memoryd's openapi.yaml: every schema
has a model (or type alias) of the same name, with exactly its properties."""

from __future__ import annotations

import copy
import typing

import yaml
from harness import REPO

from memoryd import models


def load_spec() -> dict:
    return yaml.safe_load((REPO / "openapi.yaml").read_text())


def schema_required(schema: dict, schemas: dict) -> set[str]:
    required = set(schema.get("required", []))
    for part in schema.get("allOf", []):
        if "$ref" in part:
            part = schemas[part["$ref"].rsplit("/", 1)[1]]
        required |= schema_required(part, schemas)
    return required


def schema_properties(schema: dict, schemas: dict) -> set[str]:
    props = set(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        if "$ref" in part:
            part = schemas[part["$ref"].rsplit("/", 1)[1]]
        props |= schema_properties(part, schemas)
    return props


def literal_values(alias) -> set:
    return set(typing.get_args(alias))


def drift(spec: dict, module=models) -> list[str]:
    schemas = spec["components"]["schemas"]
    problems = []
    for name, schema in schemas.items():
        model = getattr(module, name, None)
        if model is None:
            problems.append(f"{name}: no model in memoryd.models")
            continue
        if "enum" in schema:
            if literal_values(model) != set(schema["enum"]):
                problems.append(f"{name}: values {sorted(literal_values(model))} != {sorted(schema['enum'])}")
            continue
        if schema.get("type") == "object" or "allOf" in schema or "properties" in schema:
            fields = set(getattr(model, "model_fields", {}))
            wanted = schema_properties(schema, schemas)
            if wanted - fields:
                problems.append(f"{name}: properties without a field: {sorted(wanted - fields)}")
            if fields - wanted:
                problems.append(f"{name}: fields not in the schema: {sorted(fields - wanted)}")
            # What memoryd always answers has no default: a model without it is refused.
            if not isinstance(model, type):
                continue  # a free-form object (a dict alias) requires nothing
            required = {n for n, f in model.model_fields.items() if f.is_required()}
            # A field a model inherits is its base's to check (a Layout is a LayoutConfig,
            # whose defaults a request may leave out).
            own = set(vars(model).get("__annotations__", {}))
            expected = {n for n in schema_required(schema, schemas) if n in own or n in required}
            if expected != required:
                problems.append(f"{name}: required {sorted(required)} where the schema requires {sorted(expected)}")
    return problems


def test_every_schema_has_its_model():
    assert drift(load_spec()) == []


def test_a_new_schema_or_property_without_a_model_is_found():
    spec = load_spec()
    spec["components"]["schemas"]["ConsoleSession"] = {"type": "object", "properties": {"token": {"type": "string"}}}
    job = copy.deepcopy(spec["components"]["schemas"]["Job"])
    job["properties"]["priority"] = {"type": "integer"}
    spec["components"]["schemas"]["Job"] = job
    spec["components"]["schemas"]["JobState"]["enum"].append("paused")
    spec["components"]["schemas"]["TenantSummary"]["required"].remove("keys")
    found = drift(spec)
    assert "ConsoleSession: no model in memoryd.models" in found
    assert "Job: properties without a field: ['priority']" in found
    assert any(p.startswith("JobState: values") for p in found)
    assert any(p.startswith("TenantSummary: required") for p in found), found


def test_models_read_what_memoryd_answers(server, tenant):
    from memoryd import Memoryd

    with Memoryd(server.base_url, tenant[1]) as client:
        spec = client.openapi()
    assert drift(yaml.safe_load(spec)) == [], "the served description drifted from the models"
