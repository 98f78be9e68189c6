"""Write the policy file's JSON Schema (stagger.policy.schema.json_schema, made from the validator's own
table) into the chart's values.schema.json as `policies`: `make chart-schema` runs this.

    python charts/schemagen.py

tests/chart/test_policy_schema.py fails when the two differ, naming this command."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from stagger.policy.schema import json_schema

VALUES_SCHEMA = Path(__file__).resolve().parent / "stagger" / "values.schema.json"
DESCRIPTION = (
    "the policy file (nodePolicies, staggeringPolicies); empty: configs/_policies.yaml. Checked against the "
    "policy model at install (made by `make chart-schema`); `kubectl stagger check-policy` gives lockd's own "
    "messages"
)


def policies_schema() -> dict[str, Any]:
    return {**json_schema(), "description": DESCRIPTION}


def rendered() -> str:
    schema = json.loads(VALUES_SCHEMA.read_text())
    schema["properties"]["policies"] = policies_schema()
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    VALUES_SCHEMA.write_text(rendered())
    print(f"wrote the policy schema into {VALUES_SCHEMA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
