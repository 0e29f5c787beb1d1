// The ZeroMQ front end's CURVE security (ipc/zmq_curve.hpp): a ZAP handler
// that admits only listed client keys, the C++ and Python clients with key
// pairs from `llmk keys curve`; and its request deadlines.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "ipc/client.hpp"
#include "ipc/server.hpp"
#include "ipc/testing/fake_backend.hpp"
#include "ipc/zmq_curve.hpp"
#include "ipc/zmq_server.hpp"
#include "support.hpp"
#include "support/skip.hpp"

using namespace llmk;
using namespace llmk::ipc;
using llmk::test::eventually;
using nlohmann::json;
using std::chrono::milliseconds;

namespace {

std::filesystem::path temp_dir() {
  const auto dir = std::filesystem::temp_directory_path() / ("llmk_curve_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

ClientOptions curve_client(const std::string& server_public, const CurveKeyPair& pair) {
  return {.server_timeout = milliseconds(1500), .curve_server_key = server_public, .curve_public_key = pair.public_key,
          .curve_secret_key = pair.secret_key};
}

Request greedy(const std::string& prompt, int32_t max_tokens) {
  Request r;
  r.id = "r1";
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  return r;
}

std::string expected(const std::string& prompt, int32_t n) {
  return FakeBackend::expected_text(FakeBackend::tokenize(prompt, true), n);
}

}  // namespace

TEST_CASE("Key files are read strictly: a Z85 key per file, allowed keys per line", "[zmq_security]") {
  if (!has_curve()) LLMK_SKIP("this libzmq was built without CURVE (zmq_has(\"curve\") is 0)");
  const CurveKeyPair pair = make_curve_keypair();
  CHECK(pair.public_key.size() == 40);
  CHECK(curve_public_key(pair.secret_key) == pair.public_key);
  const auto keys = parse_allowed_keys("# clients\n" + pair.public_key + " alice\n\n", "allowed.txt");
  CHECK(keys == std::vector<std::string>{pair.public_key});
  try {
    parse_allowed_keys(pair.public_key + "\nnot-a-key\n", "allowed.txt");
    FAIL("a bad key was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("allowed.txt:2") != std::string::npos);
  }
  const auto file = temp_dir() / "bad.secret";
  std::ofstream(file) << "# nothing usable\nshort\n";
  try {
    read_curve_key_file(file, "server.auth.curve_secret_key_file");
    FAIL("a bad key file was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("server.auth.curve_secret_key_file") != std::string::npos);
  }
  std::filesystem::remove_all(temp_dir());
}

TEST_CASE("A CURVE server serves allowed client keys and gives others nothing", "[zmq_security]") {
  if (!has_curve()) LLMK_SKIP("this libzmq was built without CURVE (zmq_has(\"curve\") is 0)");
  const CurveKeyPair server_pair = make_curve_keypair();
  const CurveKeyPair allowed = make_curve_keypair();
  const CurveKeyPair stranger = make_curve_keypair();
  const auto allowed_file = temp_dir() / "allowed.txt";
  std::ofstream(allowed_file) << "# admitted clients\n" << allowed.public_key << " alice\n";
  FakeBackend backend;
  Metrics metrics;
  ZmqServer server(backend, metrics, {.endpoint = "tcp://127.0.0.1:*", .curve_secret_key = server_pair.secret_key,
                                      .curve_allowed_keys_file = allowed_file.string()});

  Client alice(server.endpoint(), curve_client(server_pair.public_key, allowed));
  CHECK(alice.generate(greedy("Hello", 11)).texts.at(0) == expected("Hello", 11));

  // A key not in the list, a plain client, and the right client key against
  // a wrong server key: none gets an answer, nothing is generated.
  const auto generated = backend.stats().num_generated_tokens;
  const auto fails = [&](const ClientOptions& options) {
    Client client(server.endpoint(), options);
    try {
      client.generate(greedy("Hello", 11), true, std::chrono::seconds(3));
    } catch (const Error&) {
      return true;
    }
    return false;
  };
  CHECK(fails(curve_client(server_pair.public_key, stranger)));
  CHECK(fails({.server_timeout = milliseconds(1500)}));
  CHECK(fails(curve_client(stranger.public_key, allowed)));
  CHECK(backend.stats().num_generated_tokens == generated);

  // The allowed client is still served, on its old connection and a new one.
  CHECK(alice.generate(greedy("Again", 5)).texts.at(0) == expected("Again", 5));
  Client alice2(server.endpoint(), curve_client(server_pair.public_key, allowed));
  CHECK(alice2.generate(greedy("Third", 4)).texts.at(0) == expected("Third", 4));

  // Revoked: the key leaves the file; a new connection with it gets nothing
  // (ZAP runs at the handshake: connections made before stay).
  std::ofstream(allowed_file) << stranger.public_key << "\n";
  CHECK(fails(curve_client(server_pair.public_key, allowed)));
  CHECK(alice2.generate(greedy("Fourth", 3)).texts.at(0) == expected("Fourth", 3));
  std::filesystem::remove_all(temp_dir());
}

TEST_CASE("llmk keys curve writes key files that the pyzmq example and the server use", "[zmq_security]") {
  if (!has_curve()) LLMK_SKIP("this libzmq was built without CURVE (zmq_has(\"curve\") is 0)");
  const auto dir = temp_dir();
  for (const char* name : {"server", "client"}) {
    const auto r = test::run_command(LLMK_BINARY_DIR "/bin/llmk keys curve --out " + (dir / name).string() + " 2>&1");
    INFO(r.out);
    REQUIRE(r.status == 0);
  }
  CHECK((std::filesystem::status(dir / "server.secret").permissions() & std::filesystem::perms::others_read) ==
        std::filesystem::perms::none);
  CHECK(test::run_command(LLMK_BINARY_DIR "/bin/llmk keys curve --out " + (dir / "server").string() + " 2>&1").status !=
        0);  // never overwrites a key
  std::filesystem::copy_file(dir / "client.public", dir / "allowed.txt");
  FakeBackend backend;
  AuthOptions auth;
  auth.curve_secret_key_file = (dir / "server.secret").string();
  auth.curve_allowed_keys_file = (dir / "allowed.txt").string();
  Server server(backend, {.http = "", .zmq = "tcp://127.0.0.1:*", .auth = auth});
  const std::string cmd = "/usr/bin/python3 " LLMK_SOURCE_DIR "/examples/zmq_client.py --json --max-tokens 9 --timeout 3 "
                          "--endpoint " + server.zmq()->endpoint() + " --curve-server-key " +
                          (dir / "server.public").string();
  const auto served = test::run_command(cmd + " --curve-client-key " + (dir / "client").string() + " 'Once upon'");
  INFO(served.out);
  REQUIRE(served.status == 0);
  CHECK(json::parse(served.out)["py-0"]["streamed"] == expected("Once upon", 9));
  // The server's own pair is not an allowed client.
  const auto refused = test::run_command(cmd + " --curve-client-key " + (dir / "server").string() + " 'Once upon' 2>&1");
  CHECK(refused.status == 2);
  CHECK(backend.stats().num_generated_tokens == 9);
  std::filesystem::remove_all(dir);
}

TEST_CASE("A ZeroMQ request past server.request_timeout_s ends in a deadline_exceeded error and frees its KV",
          "[zmq_security]") {
  FakeBackend backend({.step_interval = milliseconds(10)});
  Metrics metrics;
  ZmqServer zmq(backend, metrics, {.endpoint = "tcp://127.0.0.1:*", .request_timeout_s = 0.2});
  test::RawPeer peer(zmq.endpoint());
  peer.send_json({{"v", 1}, {"type", "submit"}, {"id", "slow"}, {"prompt", "x"}, {"stream", false},
                  {"params", {{"max_tokens", 400}}}});
  const json reply = peer.recv_json();
  CHECK(reply["type"] == "error");
  CHECK(reply["id"] == "slow");
  CHECK(reply["code"] == "deadline_exceeded");
  CHECK(eventually([&] { return backend.stats().kv.used_slots == 0 && backend.stats().num_running == 0; }));
}

TEST_CASE("A ZeroMQ submit's own timeout overrides the server's and a bad one is refused naming the field",
          "[zmq_security]") {
  FakeBackend backend({.step_interval = milliseconds(10)});
  Metrics metrics;
  ZmqServer zmq(backend, metrics, {.endpoint = "tcp://127.0.0.1:*"});
  test::RawPeer peer(zmq.endpoint());
  peer.send_json({{"v", 1}, {"type", "submit"}, {"id", "bad"}, {"prompt", "x"}, {"timeout", "soon"}});
  const json bad = peer.recv_json();
  CHECK(bad["code"] == "invalid_argument");
  CHECK(bad["param"] == "timeout");
  peer.send_json({{"v", 1}, {"type", "submit"}, {"id", "slow"}, {"prompt", "x"}, {"stream", false},
                  {"timeout", 0.1}, {"params", {{"max_tokens", 400}}}});
  const json reply = peer.recv_json();
  CHECK(reply["id"] == "slow");
  CHECK(reply["code"] == "deadline_exceeded");
  CHECK(eventually([&] { return backend.stats().kv.used_slots == 0 && backend.stats().num_running == 0; }));
  CHECK(backend.stats().num_generated_tokens < 100);
}
