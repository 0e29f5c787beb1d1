"""Reference renderings of chat templates, for tests/core/test_jinja_chat_templates.cpp.

Renders with PyPI's jinja2 in the environment transformers builds for
apply_chat_template: ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, the loopcontrols extension and a {% generation %} tag, the
tojson filter as transformers defines it (json.dumps with ensure_ascii=False,
indent, separators and sort_keys passed through), and the globals
raise_exception and strftime_now.

usage: chat_template_reference.py CASES.json OUT.json
CASES.json: [{"template": PATH, "variables": {...}}, ...]
OUT.json:   [{"text": STR} | {"raised": MESSAGE} | {"error": STR}, ...] in the same order;
"raised" is a raise_exception() call, "error" any other failure.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(jinja2.exceptions.TemplateError):
    pass


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: renders its body (transformers tracks assistant spans)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = environment()
    out = []
    for case in cases:
        if "template" in case:
            with open(case["template"], encoding="utf-8") as f:
                source = f.read()
        else:
            source = case["source"]
        try:
            out.append({"text": env.from_string(source).render(**case["variables"])})
        except Raised as e:
            out.append({"raised": str(e)})
        except Exception as e:  # noqa: BLE001 - any other failure is reported, not raised
            out.append({"error": f"{type(e).__name__}: {e}"})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
