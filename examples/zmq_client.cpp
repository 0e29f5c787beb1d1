// A C++ client for `llmk serve` over ZeroMQ (llmk::Client, protocol v1):
// streams one completion to stdout, then prints usage and timings.
//
//   llmk serve --model ../shared/models/stories260K &
//   ./build/bin/example_zmq_client tcp://127.0.0.1:5555 "Once upon a time" 64
//
// Against a CURVE server, the key files (as `llmk keys curve --out PREFIX`
// writes them) come from the environment:
//   LLMK_CURVE_SERVER_KEY=server.public LLMK_CURVE_CLIENT_KEY=client ./build/bin/example_zmq_client
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "ipc/client.hpp"
#include "ipc/zmq_curve.hpp"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: example_zmq_client [ENDPOINT [PROMPT [MAX_TOKENS]]]\n"
               "  Streams one greedy completion from `llmk serve` over ZeroMQ (protocol v1) to stdout,\n"
               "  then prints usage and timings to stderr.\n"
               "  ENDPOINT    the server's ZeroMQ endpoint (default tcp://127.0.0.1:5555, server.zmq)\n"
               "  PROMPT      the prompt text (default \"Once upon a time\")\n"
               "  MAX_TOKENS  most tokens to generate (default 64)\n"
               "  With CURVE: LLMK_CURVE_SERVER_KEY=FILE (the server's public key) and\n"
               "  LLMK_CURVE_CLIENT_KEY=PREFIX (PREFIX.public, PREFIX.secret: this client's pair)\n");
}

// Streams the request's text to stdout; 0 when it finished, 1 on an error.
int stream(llmk::Client& client, const llmk::Request& request) {
  auto events = client.submit(request, /*stream=*/true);
  std::printf("%s", request.prompt.c_str());
  while (auto ev = events->next(std::chrono::seconds(60))) {
    if (ev->finish_reason == llmk::FinishReason::error) {
      std::fprintf(stderr, "\nerror: %s\n", ev->error.c_str());
      return 1;
    }
    std::printf("%s", ev->text_delta.c_str());
    std::fflush(stdout);
    if (ev->finished) {
      std::printf("\n");
      std::fprintf(stderr, "finish: %s, %d prompt + %d completion tokens, TTFT %.1f ms, total %.1f ms\n",
                   ev->finish_reason == llmk::FinishReason::length ? "length" : "stop", ev->usage.prompt_tokens,
                   ev->usage.completion_tokens, ev->timings.time_to_first_token_s * 1e3, ev->timings.e2e_s * 1e3);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    }
  }
  if (argc > 4) {
    usage(stderr);
    return 2;
  }
  llmk::Request request;
  request.id = "example-1";
  request.prompt = argc > 2 ? argv[2] : "Once upon a time";
  request.sampling.max_tokens = argc > 3 ? std::atoi(argv[3]) : 64;
  request.sampling.temperature = 0;  // greedy
  if (request.sampling.max_tokens <= 0) {
    std::fprintf(stderr, "MAX_TOKENS '%s' is not a positive number\n", argv[3]);
    usage(stderr);
    return 2;
  }
  const std::string endpoint = argc > 1 ? argv[1] : "tcp://127.0.0.1:5555";
  try {
    llmk::ClientOptions options;
    const char* server_key = std::getenv("LLMK_CURVE_SERVER_KEY");
    const char* client_key = std::getenv("LLMK_CURVE_CLIENT_KEY");
    if (server_key && client_key) {
      options.curve_server_key = llmk::ipc::read_curve_key_file(server_key, "LLMK_CURVE_SERVER_KEY");
      options.curve_public_key =
          llmk::ipc::read_curve_key_file(std::string(client_key) + ".public", "LLMK_CURVE_CLIENT_KEY");
      options.curve_secret_key =
          llmk::ipc::read_curve_key_file(std::string(client_key) + ".secret", "LLMK_CURVE_CLIENT_KEY");
    }
    llmk::Client client(endpoint, options);
    std::fprintf(stderr, "server: %s\n", client.health().dump().c_str());
    return stream(client, request);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
