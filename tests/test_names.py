"""``scheduler.names`` against what users install: the CRDs spell the group, kinds and plurals the code
uses, and no wire name is spelled twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scheduler import names

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("crd", "kind", "plural"),
    [
        ("trainingjob.yaml", names.TRAININGJOB_KIND, names.TRAININGJOB_PLURAL),
        ("trainingqueue.yaml", names.TRAININGQUEUE_KIND, names.TRAININGQUEUE_PLURAL),
    ],
)
def test_the_installed_crds_spell_the_names_the_code_uses(crd: str, kind: str, plural: str) -> None:
    for path in (ROOT / "crds" / crd, ROOT / "helm" / "perfsched" / "crds" / crd):
        doc = yaml.safe_load(path.read_text())
        assert doc["metadata"]["name"] == f"{plural}.{names.GROUP}"
        assert doc["spec"]["group"] == names.GROUP
        assert doc["spec"]["names"]["kind"] == kind
        assert doc["spec"]["names"]["plural"] == plural
        assert [v["name"] for v in doc["spec"]["versions"]] == [names.VERSION]
    assert names.API_VERSION == "perfsched.dev/v1alpha1"


def test_every_wire_name_is_spelled_once_and_perfsched_keys_carry_the_group() -> None:
    values = {k: v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}
    by_value: dict[str, list[str]] = {}
    for k, v in values.items():
        by_value.setdefault(v, []).append(k)
    assert {v: ks for v, ks in by_value.items() if len(ks) > 1} == {}
    keys = [k for k in values if k.startswith(("LABEL_", "ANNOTATION_"))]
    perfsched_keys = [values[k] for k in keys if not values[k].startswith(("nvidia.com/", "topology."))]
    assert perfsched_keys and all(v.startswith(names.GROUP + "/") for v in perfsched_keys)
