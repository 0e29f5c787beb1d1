"""Validates tool-call arguments against their tools' JSON Schemas with PyPI's jsonschema.

usage: tool_schema_check.py CASES.json   (CASES.json: [{"schema": {...}, "instance": ...}, ...])
Prints [true | false, ...] in order; exits 3 when jsonschema is not installed.
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    sys.exit(3)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        validator = jsonschema.validators.validator_for(case["schema"])
        validator.check_schema(case["schema"])
        out.append(validator(case["schema"]).is_valid(case["instance"]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
