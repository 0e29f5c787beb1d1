// The structured-output fields of a request (ipc/structured_json.hpp): each
// spelling to its grammar kind, text and field; wrong shapes and two
// constraints at once refused naming the field; the ZeroMQ protocol's params
// take the same fields.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "ipc/structured_json.hpp"
#include "ipc/zmq_protocol.hpp"

using namespace llmk;
using namespace llmk::ipc;
using nlohmann::json;

namespace {

std::string field_of_error(const json& body) {
  try {
    parse_structured_output(body);
  } catch (const FieldError& e) {
    return e.field();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("Each structured-output field becomes its grammar kind, text and field", "[structured]") {
  CHECK(parse_structured_output(json::object()) == nullptr);
  CHECK(parse_structured_output(json{{"response_format", {{"type", "text"}}}}) == nullptr);
  auto so = parse_structured_output(json{{"response_format", {{"type", "json_object"}}}});
  REQUIRE(so);
  CHECK(so->kind == GrammarKind::json_object);
  CHECK(so->field == "response_format");
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  so = parse_structured_output(
      json{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}});
  REQUIRE(so);
  CHECK(so->kind == GrammarKind::json_schema);
  CHECK(json::parse(so->text) == schema);
  CHECK(so->field == "response_format.json_schema.schema");
  so = parse_structured_output(json{{"structured_outputs", {{"json", schema.dump()}}}});  // a schema as a string
  REQUIRE(so);
  CHECK(json::parse(so->text) == schema);
  CHECK(so->field == "structured_outputs.json");
  so = parse_structured_output(json{{"guided_regex", "[a-z]+"}});
  REQUIRE(so);
  CHECK(so->kind == GrammarKind::regex);
  CHECK(so->text == "[a-z]+");
  CHECK(so->field == "guided_regex");
  so = parse_structured_output(json{{"structured_outputs", {{"grammar", "root ::= \"a\""}, {"regex", nullptr}}}});
  REQUIRE(so);
  CHECK(so->kind == GrammarKind::ebnf);
  so = parse_structured_output(json{{"guided_choice", {"a\"b", "c\\d"}}});
  REQUIRE(so);
  CHECK(so->kind == GrammarKind::ebnf);
  CHECK(so->text == R"(root ::= "a\"b" | "c\\d")");
}

TEST_CASE("Wrong shapes and two constraints at once are refused naming the field", "[structured]") {
  CHECK(field_of_error(json{{"response_format", "json"}}) == "response_format");
  CHECK(field_of_error(json{{"response_format", {{"type", "yaml"}}}}) == "response_format");
  CHECK(field_of_error(json{{"response_format", {{"type", "json_schema"}}}}) == "response_format");
  CHECK(field_of_error(json{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}) ==
        "response_format");
  CHECK(field_of_error(json{{"response_format",
                             {{"type", "json_schema"}, {"json_schema", {{"schema", 5}}}}}}) ==
        "response_format.json_schema.schema");
  CHECK(field_of_error(json{{"structured_outputs", {{"regex", "a"}, {"grammar", "b"}}}}) == "structured_outputs");
  CHECK(field_of_error(json{{"structured_outputs", {{"structural_tag", "x"}}}}) == "structured_outputs");
  CHECK(field_of_error(json{{"structured_outputs", {{"regex", ""}}}}) == "structured_outputs.regex");
  CHECK(field_of_error(json{{"guided_choice", json::array()}}) == "guided_choice");
  CHECK(field_of_error(json{{"guided_json", "{not json"}}) == "guided_json");
  CHECK(field_of_error(json{{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}}) ==
        "guided_regex");
}

TEST_CASE("A ZeroMQ submit's params take the structured-output fields", "[structured]") {
  const json msg = {{"v", 1}, {"type", "submit"}, {"id", "r"}, {"prompt", "hi"},
                    {"params", {{"max_tokens", 8}, {"structured_outputs", {{"regex", "[0-9]+"}}}}}};
  const ClientMessage parsed = parse_client_message(msg.dump(), 1024, 32000);
  REQUIRE(parsed.request.sampling.structured);
  CHECK(parsed.request.sampling.structured->kind == GrammarKind::regex);
  CHECK(parsed.request.sampling.structured->field == "structured_outputs.regex");
}
