"""Random registry operations, decided and applied as the controller does: whatever a decision writes,
apply takes (a MetadataInvariantError here is a decision bug), the image checks out after every step, an
id never names two texts over the whole history, a snapshot restores the same image, and nothing a held
schema references is ever gone."""

from __future__ import annotations

import json
import random

import pytest

from kanal.metadata import check_image, image_from_snapshot, image_to_snapshot
from kanal.metadata.schema_registry import (
    decide_delete_subject,
    decide_delete_version,
    decide_register_schema,
    decide_set_registry_config,
    decide_set_registry_mode,
)
from kanal.metadata.schema_registry_rules import CachingParser
from kanal.v1 import schema_registry_pb2 as pb

SUBJECTS = ["a", "b", "c"]
LEVELS = ["BACKWARD", "FORWARD", "FULL", "NONE", "BACKWARD_TRANSITIVE"]


def field_set(rng: random.Random) -> list[dict]:
    """A User record's fields: `name` always, the rest drawn (with or without defaults)."""
    fields = [{"name": "name", "type": "string"}]
    for extra in ("age", "email", "zip"):
        kind = rng.choice(["absent", "default", "required"])
        if kind == "default":
            fields.append({"name": extra, "type": "string", "default": ""})
        elif kind == "required":
            fields.append({"name": extra, "type": "string"})
    return fields


def base_schema(rng: random.Random) -> tuple[str, list[pb.SchemaReference]]:
    return json.dumps({"type": "record", "name": "User", "fields": field_set(rng)}), []


def referencing_schema(rng: random.Random, image) -> tuple[str, list[pb.SchemaReference]]:
    """A Wrapper that references the User of some live version, when there is one."""
    live = [(s, v) for s, versions in image.subjects.items() for v, st in versions.items() if not st.deleted]
    if not live:
        return base_schema(rng)
    subject, version = rng.choice(sorted(live))
    text = json.dumps({"type": "record", "name": "Wrapper", "fields": [{"name": "user", "type": "User"}]})
    return text, [pb.SchemaReference(name="User", subject=subject, version=version)]


def step(rng: random.Random, h, parse) -> None:
    image, ctx = h.image, h.ctx()
    subject = rng.choice(SUBJECTS)
    op = rng.choices(["register", "ref", "soft", "hard", "subject", "config", "mode"],
                     weights=[8, 3, 3, 2, 2, 2, 1])[0]
    if op in ("register", "ref"):
        text, refs = base_schema(rng) if op == "register" else referencing_schema(rng, image)
        request = pb.RegisterSchemaRequest(subject=subject + ("-ref" if refs else ""), schema=text,
                                           references=refs, normalize=rng.random() < 0.3,
                                           version=rng.choice([0, 0, 0, -1]))
        if image.registry_modes.get("") == "IMPORT":
            request.id = rng.randint(1, 40)
        decision = decide_register_schema(image, request, parse=parse, **ctx)
    elif op in ("soft", "hard"):
        versions = sorted(image.subjects.get(subject, {})) or [1]
        request = pb.DeleteVersionRequest(subject=subject, version=rng.choice([-1, *versions]),
                                          permanent=op == "hard")
        decision = decide_delete_version(image, request, **ctx)
    elif op == "subject":
        decision = decide_delete_subject(image, pb.DeleteSubjectRequest(
            subject=rng.choice([subject, subject + "-ref"]), permanent=rng.random() < 0.5), **ctx)
    elif op == "config":
        decision = decide_set_registry_config(image, pb.SetRegistryConfigRequest(
            subject=rng.choice(["", subject]), compatibility=rng.choice(LEVELS), delete=rng.random() < 0.2),
            **ctx)
    else:
        decision = decide_set_registry_mode(image, pb.SetRegistryModeRequest(
            mode=rng.choice(["READWRITE", "READWRITE", "IMPORT"]), force=rng.random() < 0.5), **ctx)
    h.commit(decision)


@pytest.mark.parametrize("seed", range(4))
def test_random_registry_operations_keep_every_rule(harness, seed) -> None:
    rng = random.Random(seed)
    parse = CachingParser()
    texts: dict[int, str] = {}
    for _ in range(250):
        step(rng, harness, parse)
        image = harness.image
        check_image(image)
        for schema_id, schema in image.schemas.items():
            assert texts.setdefault(schema_id, schema.text) == schema.text  # an id names one text, ever
        assert set(texts) <= set(image.schemas)  # and is never forgotten
        for (subject, version), ids in image.referenced_by.items():
            if any(image.schema_holders.get(i) for i in ids):
                assert version in image.subjects.get(subject, {})  # nothing a held schema needs is gone
    assert len(texts) > 5
    assert image_from_snapshot(image_to_snapshot(harness.image)) == harness.image
