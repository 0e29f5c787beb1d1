// Embedding llmk's pipeline in a larger CAF program: a user actor rewrites
// prompts in front of the tokenizer actor, and another consumes the token
// events behind the detokenizer, both on the Engine's actor system.
//
//   main ──(submit, Request)──▶ rewriter ──(submit, Request, consumer)──▶ tokenizer ─▶ … ─▶ detokenizer
//                                                                                             │ RequestEvent
//   main ◀──(wait answered)─── consumer ◀─────────────────────────────────────────────────────┘
//
// usage: example_embed_pipeline MODEL_DIR [TOPIC...]
#include <caf/all.hpp>

#include <iostream>
#include <map>

#include "actors/engine.hpp"
#include "actors/messages.hpp"
#include "core/error.hpp"

using wait_atom = caf::atom_constant<caf::atom("wait")>;

// Turns a topic into a story opening and forwards the request to the
// pipeline, naming the consumer as the receiver of its events.
caf::behavior rewriter(caf::event_based_actor* self, caf::actor tokenizer, caf::actor consumer) {
  return {
      [=](llmk::submit_atom, llmk::Request& request) {
        request.prompt = "Once upon a time, " + request.prompt + " and";
        self->send(tokenizer, llmk::submit_atom::value, std::move(request), consumer);
      },
  };
}

struct ConsumerState {
  ConsumerState() {}
  std::map<std::string, std::string> texts;  // request id -> text so far
  std::map<std::string, int32_t> num_tokens;
  size_t num_expected = 0;
  size_t num_done = 0;
  std::vector<caf::response_promise> waiting;
};

// Collects every request's text; answers `wait` once all expected requests are done.
caf::behavior consumer(caf::stateful_actor<ConsumerState>* self, size_t num_expected) {
  self->state.num_expected = num_expected;
  return {
      [=](llmk::RequestEvent& event) {
        auto& st = self->state;
        st.texts[event.request_id] += event.text_delta;
        st.num_tokens[event.request_id] += static_cast<int32_t>(event.token_ids.size());
        if (event.finish_reason == llmk::FinishReason::error)
          std::cerr << event.request_id << ": error: " << event.error << '\n';
        if (event.request_done && ++st.num_done == st.num_expected)
          for (auto& promise : st.waiting) promise.deliver(st.texts);
      },
      [=](wait_atom) -> caf::result<std::map<std::string, std::string>> {
        auto& st = self->state;
        if (st.num_done == st.num_expected) return st.texts;
        st.waiting.push_back(self->make_response_promise());
        return st.waiting.back();
      },
  };
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: example_embed_pipeline MODEL_DIR [TOPIC...]\n";
    return 2;
  }
  std::vector<std::string> topics;
  for (int i = 2; i < argc; ++i) topics.emplace_back(argv[i]);
  if (topics.empty()) topics = {"a cat found a red ball", "Tom went to the park", "the sun was hot"};
  try {
    llmk::EngineConfig config;
    config.model.path = argv[1];
    config.kv_cache.capacity_tokens = 8192;
    llmk::Engine engine(config);
    caf::actor_system& system = engine.system();

    auto sink = system.spawn(consumer, topics.size());
    auto front = system.spawn(rewriter, engine.tokenizer_actor(), sink);
    int status = 0;
    {
      caf::scoped_actor self{system};
      for (size_t i = 0; i < topics.size(); ++i) {
        llmk::Request request;
        request.id = "story-" + std::to_string(i);
        request.prompt = topics[i];
        request.sampling.temperature = 0;
        request.sampling.max_tokens = 32;
        self->send(front, llmk::submit_atom::value, std::move(request));
      }
      self->request(sink, std::chrono::seconds(60), wait_atom::value)
          .receive(
              [&](std::map<std::string, std::string>& texts) {
                for (size_t i = 0; i < topics.size(); ++i) {
                  std::string id = "story-" + std::to_string(i);
                  std::cout << id << ": Once upon a time, " << topics[i] << " and" << texts[id] << '\n';
                }
              },
              [&](caf::error& err) {
                std::cerr << "no answer: " << system.render(err) << '\n';
                status = 1;
              });
    }
    // User actors must end before the Engine joins its actor system.
    caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
    return status;
  } catch (const llmk::Error& e) {
    std::cerr << "example_embed_pipeline: " << e.what() << '\n';
    return 1;
  }
}
