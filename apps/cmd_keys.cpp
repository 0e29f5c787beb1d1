// llmk keys curve: a CURVE key pair for the ZeroMQ front end and its clients
// (zmq_curve_keypair), printed in Z85 or written to PREFIX.public and
// PREFIX.secret (the secret readable by its owner only).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "apps/command.hpp"
#include "core/error.hpp"
#include "ipc/zmq_curve.hpp"

namespace llmk::app {
namespace {

int run_curve(const std::string& out_prefix) {
  const ipc::CurveKeyPair pair = ipc::make_curve_keypair();
  if (out_prefix.empty()) {
    std::printf("public %s\nsecret %s\n", pair.public_key.c_str(), pair.secret_key.c_str());
    return 0;
  }
  namespace fs = std::filesystem;
  const fs::path secret_file = out_prefix + ".secret";
  const fs::path public_file = out_prefix + ".public";
  for (const auto& f : {secret_file, public_file})
    if (fs::exists(f)) throw Error(ErrorCode::invalid_argument, f.string() + " exists: not overwriting a key");
  {
    std::ofstream(secret_file) << "";  // created empty, restricted, then written
    fs::permissions(secret_file, fs::perms::owner_read | fs::perms::owner_write);
    std::ofstream out(secret_file);
    out << "# CURVE secret key (Z85): server.auth.curve_secret_key_file, or a client's\n" << pair.secret_key << "\n";
    if (!out) throw Error(ErrorCode::invalid_argument, "cannot write " + secret_file.string());
  }
  std::ofstream out(public_file);
  out << "# CURVE public key (Z85): give it to the other side\n" << pair.public_key << "\n";
  if (!out) throw Error(ErrorCode::invalid_argument, "cannot write " + public_file.string());
  std::printf("%s\n%s\n", public_file.c_str(), secret_file.c_str());
  return 0;
}

const CommandRegistration kKeys{
    "keys", "Make keys: `llmk keys curve` prints a ZeroMQ CURVE key pair (Z85)", [](CLI::App& cmd) {
      auto* curve = cmd.add_subcommand("curve", "A CURVE key pair for server.auth.curve_* and ZeroMQ clients");
      auto out_prefix = std::make_shared<std::string>();
      curve->add_option("--out", *out_prefix, "write PREFIX.public and PREFIX.secret instead of printing");
      cmd.require_subcommand(1);
      return std::function<int()>([curve, out_prefix] {
        if (curve->parsed()) return run_curve(*out_prefix);
        return 2;
      });
    }};

}  // namespace
}  // namespace llmk::app
